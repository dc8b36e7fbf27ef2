package main

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/scripts"
)

// keyPostgresqlConf is the tier's settings file in the scripts ConfigMap; the
// entrypoint includes it after its own replication settings.
const keyPostgresqlConf = "postgresql.conf"

// scriptFiles are the embedded scripts, read once: they are constant, and so
// is their digest.
var (
	scriptFiles = scripts.Files()
	scriptsHash = digest(scriptFiles)
)

// postgresqlConf renders the tier's settings, sorted, one per line.
func postgresqlConf(db *database) string {
	var b strings.Builder
	b.WriteString("# Tier " + db.Size + " settings, written by function-database.\n")
	for _, k := range slices.Sorted(maps.Keys(db.Tier.Settings)) {
		b.WriteString(k + " = '" + db.Tier.Settings[k] + "'\n")
	}
	return b.String()
}

// scriptsConfigMap ships the scripts and settings the pods and jobs run,
// and records that the database has been initialised.
func scriptsConfigMap(db *database, p *plan) *corev1.ConfigMap {
	data := make(map[string]string, len(scriptFiles)+2)
	maps.Copy(data, scriptFiles)
	data[keyPostgresqlConf] = postgresqlConf(db)
	if p.Initialized {
		data[keyInitialized] = "true"
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      scriptsName(db),
			Namespace: db.Namespace,
			Labels:    labels(db, componentConfig),
		},
		Data: data,
	}
}

// configHash digests what the instances run (the scripts and the tier's
// settings; not the initialized marker, which must not restart anything), so
// that a change rolls the pods.
func configHash(db *database) string {
	return digest(map[string]string{"scripts": scriptsHash, keyPostgresqlConf: postgresqlConf(db)})[:16]
}

// digest is a sha256 over sorted keys and values.
func digest(m map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(m[k]))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
