package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestPostgresqlConf: the WAL bounds follow the data volume the instances
// have (the observed one once it exists), and a tier's own value wins.
func TestPostgresqlConf(t *testing.T) {
	conf := func(volume string, tier map[string]string) string {
		db := testDB()
		db.Size = "small"
		db.Tier.Settings = tier
		p := &plan{Templates: []corev1.PersistentVolumeClaim{
			volumeClaimTemplate(volData, resource.MustParse(volume), ""),
			volumeClaimTemplate(volBackups, resource.MustParse("1Ti"), ""),
		}}
		return postgresqlConf(db, p)
	}
	head := "# Tier small settings and WAL bounds of the data volume, written by function-database.\n"
	cases := map[string]struct {
		volume string
		tier   map[string]string
		want   string
	}{
		"SmallestVolume": {volume: "1Gi", want: "max_slot_wal_keep_size = '128MB'\nmax_wal_size = '256MB'\nwal_keep_size = '64MB'\n"},
		"FourGi":         {volume: "4Gi", want: "max_slot_wal_keep_size = '512MB'\nmax_wal_size = '1024MB'\nwal_keep_size = '256MB'\n"},
		"Decimal":        {volume: "10G", want: "max_slot_wal_keep_size = '1192MB'\nmax_wal_size = '1024MB'\nwal_keep_size = '256MB'\n"},
		"LargeVolume":    {volume: "50Gi", want: "max_slot_wal_keep_size = '2048MB'\nmax_wal_size = '1024MB'\nwal_keep_size = '256MB'\n"},
		"TierWins": {volume: "1Gi", tier: map[string]string{"max_wal_size": "2GB", "work_mem": "4MB"},
			want: "max_slot_wal_keep_size = '128MB'\nmax_wal_size = '2GB'\nwal_keep_size = '64MB'\nwork_mem = '4MB'\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(head+tc.want, conf(tc.volume, tc.tier)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
