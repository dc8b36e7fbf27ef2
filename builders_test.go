package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func testDB() *database {
	return &database{Name: "orders", Namespace: "shop", SQLName: "orders", ClusterDomain: "cluster.local", AllowedNamespaces: []string{"monitoring"}}
}

var wantLabels = map[string]string{
	"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders",
	"app.kubernetes.io/component": "database", "app.kubernetes.io/managed-by": "function-database",
}

func TestServices(t *testing.T) {
	port := []corev1.ServicePort{{Name: "postgresql", Port: 5432, TargetPort: intstr.FromString("postgresql"), Protocol: corev1.ProtocolTCP}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: wantLabels}
	}
	tm := metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	// Instances only: the backup and restore pods carry name and instance too.
	sel := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "database"}
	cases := map[string]struct {
		got, want *corev1.Service
	}{
		"Primary": {primaryService(testDB(), 0), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders"), Spec: corev1.ServiceSpec{
			Ports: port, Selector: map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "statefulset.kubernetes.io/pod-name": "orders-0"},
			PublishNotReadyAddresses: true,
		}}},
		// After a failover the rw Service follows the promoted ordinal.
		"PrimaryAfterFailover": {primaryService(testDB(), 2), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders"), Spec: corev1.ServiceSpec{
			Ports: port, Selector: map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "statefulset.kubernetes.io/pod-name": "orders-2"},
			PublishNotReadyAddresses: true,
		}}},
		"Read": {readService(testDB()), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders-r"), Spec: corev1.ServiceSpec{Ports: port, Selector: sel}}},
		"Headless": {headlessService(testDB()), &corev1.Service{TypeMeta: tm, ObjectMeta: meta("orders-hl"), Spec: corev1.ServiceSpec{
			Ports: port, Selector: sel, ClusterIP: "None", PublishNotReadyAddresses: true,
		}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, tc.got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestPolicies(t *testing.T) {
	sel := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "database"}
	// The NetworkPolicy guards every pod of the Database (jobs included).
	all := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders"}
	wantPDB := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Labels: wantLabels},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}},
	}
	if d := cmp.Diff(wantPDB, podDisruptionBudget(testDB())); d != "" {
		t.Errorf("PDB (-want +got):\n%s", d)
	}
	port := intstr.FromString("postgresql")
	netLabels := map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "network", "app.kubernetes.io/managed-by": "function-database"}
	wantNP := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", Labels: netLabels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: all},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: &port}},
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{}},
					{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
						Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"monitoring"},
					}}}},
				},
			}},
		},
	}
	if d := cmp.Diff(wantNP, networkPolicy(testDB())); d != "" {
		t.Errorf("NetworkPolicy (-want +got):\n%s", d)
	}
}

func TestCredentialsSecretEscapes(t *testing.T) {
	s := credentialsSecret(testDB(), passwords{App: `p@ss:w\rd/?`})
	want := map[string]string{
		"uri":      "postgresql://orders:p%40ss%3Aw%5Crd%2F%3F@orders.shop.svc.cluster.local:5432/orders",
		"jdbc-uri": "jdbc:postgresql://orders.shop.svc.cluster.local:5432/orders?user=orders&password=p%40ss%3Aw%5Crd%2F%3F",
		"pgpass":   "orders.shop.svc.cluster.local:5432:orders:orders:p@ss\\:w\\\\rd/?\n",
	}
	for k, v := range want {
		if got := string(s.Data[k]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

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
