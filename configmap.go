package main

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/internal/wire"
	"github.com/example/function-database/scripts"
)

// scriptFiles are the scripts as shipped (scripts.Shipped: without their
// comments), read once: they are constant, and so is the digest of those the
// instances run.
var (
	scriptFiles         = immortalScripts(scripts.Shipped())
	instanceScriptsHash = digest(instanceScripts(scriptFiles))
)

// immortalScripts registers the scripts with the encoder as strings that
// live as long as the process (wire.Immortal): checked for UTF-8 once, not
// in every response.
func immortalScripts(files map[string]string) map[string]string {
	for _, s := range files {
		// One that is not valid UTF-8 stays unregistered: every response
		// then reports it, as before.
		_ = wire.Immortal(s)
	}
	return files
}

// instanceScripts are the scripts the instance containers run (the
// entrypoint, the probes, the preStop hook, the sidecar, and their shared
// lib.sh): a change of
// one of them rolls the pods. backup.sh and restore.sh run in Jobs that read
// the ConfigMap when they start: a change of theirs restarts nothing.
func instanceScripts(files map[string]string) map[string]string {
	out := make(map[string]string, 5)
	for _, name := range []string{scripts.Entrypoint, scripts.Probe, scripts.PreStop, scripts.SyncPasswords, scripts.Lib} {
		out[name] = files[name]
	}
	return out
}

// instanceSettings are the settings the instances run: the WAL bounds of the
// data volume, and the tier's settings (which win: a platform team may tune
// max_wal_size on purpose).
func instanceSettings(db *database, p *plan) map[string]string {
	settings := walSettings(dataVolume(p))
	if db.ObjectStorage != nil {
		maps.Copy(settings, archiveSettings(db))
	}
	if db.Durability == durabilitySync && p.Replicas > 1 {
		// A commit returns once any one standby flushed it: the failover
		// Job promotes the standby with the most WAL, which then holds
		// every acknowledged commit. Reloadable: switching durability
		// restarts nothing. A standby is named by its application_name
		// (its pod name); '*' is any of them, whoever is primary.
		settings["synchronous_standby_names"] = "ANY 1 (*)"
		settings["synchronous_commit"] = "on"
	}
	maps.Copy(settings, db.Tier.Settings)
	return settings
}

// postgresqlConf renders the settings the instances run, sorted, one per
// line.
func postgresqlConf(db *database, p *plan) string {
	return renderConf(db, instanceSettings(db, p))
}

func renderConf(db *database, settings map[string]string) string {
	var b strings.Builder
	b.WriteString("# Tier " + db.Size + " settings and WAL bounds of the data volume, written by function-database.\n")
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		b.WriteString(k + " = '" + settings[k] + "'\n")
	}
	return b.String()
}

// walSettings keeps the WAL to roughly a quarter of the data volume, so that
// neither ordinary writes (max_wal_size, 1GB by default), nor the WAL kept
// for a standby that reconnects (wal_keep_size), nor an abandoned replication
// slot (max_slot_wal_keep_size: a standby down or scaled away) can fill it:
// PostgreSQL's defaults assume a disk much larger than 1Gi. Volumes of 4Gi
// and more (16Gi for the slot bound) keep the usual values.
func walSettings(volume resource.Quantity) map[string]string {
	mb := volume.Value() >> 20
	return map[string]string{
		"max_wal_size":           strconv.FormatInt(min(1024, mb/4), 10) + "MB",
		"wal_keep_size":          strconv.FormatInt(min(256, mb/16), 10) + "MB",
		"max_slot_wal_keep_size": strconv.FormatInt(min(2048, mb/8), 10) + "MB",
	}
}

// dataVolume is the size of the data volume the instances have: the
// planned claim template (the observed one once it exists).
func dataVolume(p *plan) resource.Quantity {
	for _, t := range p.Templates {
		if t.Name == volData {
			return t.Spec.Resources.Requests[corev1.ResourceStorage]
		}
	}
	return resource.Quantity{}
}

// scriptsConfigMap ships the scripts and settings (conf, postgresqlConf's)
// the pods and jobs run, and records that the database has been initialised.
func scriptsConfigMap(db *database, p *plan, conf string) *corev1.ConfigMap {
	data := make(map[string]string, len(scriptFiles)+4)
	maps.Copy(data, scriptFiles)
	data[keyPostgresqlConf] = conf
	if p.Initialized {
		data[keyInitialized] = "true"
	}
	if db.ObjectStorage != nil {
		data[keyPgbackrestConf] = pgbackrestConf(db, p, p.Archive.hasCA())
		archiveRestoreKeys(db, p, data)
	}
	data[keyPrimary] = strconv.Itoa(p.Primary)
	data[keyInstances] = strconv.Itoa(int(p.Replicas))
	data[keySwitchoverOnStop] = strconv.FormatBool(db.Failover && p.Replicas > 1)
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

// configHash digests what a running instance only picks up by restarting:
// the scripts its containers run and the settings of postmaster context.
// Not the initialized marker, not the jobs' scripts, and not the reloadable
// settings, which the sidecar reloads (pgsettings.go): a change of those
// must not restart every primary at once.
func configHash(settings map[string]string) string {
	return digest(map[string]string{"scripts": instanceScriptsHash, "restart-settings": restartSettings(settings)})[:16]
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
