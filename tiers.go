package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/input/v1beta1"
	"github.com/example/function-database/internal/wire"
)

// Size tiers a Database's spec.size may name.
const (
	sizeSmall  = "small"
	sizeMedium = "medium"
	sizeLarge  = "large"
)

var sizes = []string{sizeSmall, sizeMedium, sizeLarge}

// tier is a resolved size tier: built-in values with the input's overrides.
type tier struct {
	Replicas      int32
	CPU           resource.Quantity
	Memory        resource.Quantity
	Storage       resource.Quantity
	BackupStorage resource.Quantity
	Settings      map[string]string
}

// builtinTiers are the classic tiers of the operators this function replaces
// (1/2/3 instances), with PostgreSQL settings sized to each tier's memory:
// shared_buffers at a quarter of memory, as the PostgreSQL docs advise.
func builtinTiers() map[string]v1beta1.Tier {
	return map[string]v1beta1.Tier{
		sizeSmall: {
			Replicas: ptr.To[int32](1), CPU: "500m", Memory: "512Mi", Storage: "10Gi", BackupStorage: "10Gi",
			Settings: map[string]string{"max_connections": "100", "shared_buffers": "128MB", "effective_cache_size": "384MB", "work_mem": "4MB", "maintenance_work_mem": "32MB"},
		},
		sizeMedium: {
			Replicas: ptr.To[int32](2), CPU: "1", Memory: "1Gi", Storage: "20Gi", BackupStorage: "20Gi",
			Settings: map[string]string{"max_connections": "200", "shared_buffers": "256MB", "effective_cache_size": "768MB", "work_mem": "4MB", "maintenance_work_mem": "64MB"},
		},
		sizeLarge: {
			Replicas: ptr.To[int32](3), CPU: "2", Memory: "2Gi", Storage: "50Gi", BackupStorage: "50Gi",
			Settings: map[string]string{"max_connections": "400", "shared_buffers": "512MB", "effective_cache_size": "1536MB", "work_mem": "8MB", "maintenance_work_mem": "128MB"},
		},
	}
}

// resolveTiers merges the input's tier overrides over the built-in tiers and
// parses every quantity, so that a bad input names its field once instead of
// failing on whichever Database happens to use the tier.
func resolveTiers(in *v1beta1.Input) (map[string]tier, field.ErrorList) {
	var errs field.ErrorList
	path := field.NewPath("input", "tiers")
	for _, name := range slices.Sorted(maps.Keys(in.Tiers)) {
		if !slices.Contains(sizes, name) {
			errs = append(errs, field.NotSupported(path.Key(name), name, sizes))
		}
	}
	out := make(map[string]tier, len(sizes))
	for name, base := range builtinTiers() {
		o := in.Tiers[name]
		p := path.Key(name)
		t := tier{Replicas: *base.Replicas, Settings: maps.Clone(base.Settings)}
		if o.Replicas != nil {
			t.Replicas = *o.Replicas
			if t.Replicas < 1 || t.Replicas > maxReplicas {
				errs = append(errs, field.Invalid(p.Child("replicas"), t.Replicas, fmt.Sprintf("must be between 1 and %d", maxReplicas)))
			}
		}
		var e field.ErrorList
		t.CPU, e = positiveQuantity(p.Child("cpu"), or(o.CPU, base.CPU))
		errs = append(errs, e...)
		t.Memory, e = positiveQuantity(p.Child("memory"), or(o.Memory, base.Memory))
		errs = append(errs, e...)
		t.Storage, e = volumeQuantity(p.Child("storage"), or(o.Storage, base.Storage))
		errs = append(errs, e...)
		t.BackupStorage, e = volumeQuantity(p.Child("backupStorage"), or(o.BackupStorage, base.BackupStorage))
		errs = append(errs, e...)
		for _, k := range slices.Sorted(maps.Keys(o.Settings)) {
			errs = append(errs, validateSetting(p.Child("settings").Key(k), k, o.Settings[k])...)
			t.Settings[k] = o.Settings[k]
		}
		out[name] = t
	}
	return out, errs
}

// maxReplicas bounds a tier: more standbys than this is a different product.
const maxReplicas = 9

// validateSetting keeps postgresql.conf well-formed: a setting is one line,
// a plain parameter name, and a value that cannot break out of its quotes.
func validateSetting(p *field.Path, k, v string) field.ErrorList {
	var errs field.ErrorList
	if !settingName.MatchString(k) {
		errs = append(errs, field.Invalid(p, k, "must be a postgresql.conf parameter name (lower case letters, digits, _ and .)"))
	}
	if strings.ContainsAny(v, "'\n\r\\") || v == "" {
		errs = append(errs, field.Invalid(p, v, "must be a non-empty single-line value without quotes or backslashes"))
	}
	if protectedSettings[k] {
		errs = append(errs, field.Forbidden(p, "is managed by function-database (replication and listening settings) and cannot be overridden"))
	}
	return errs
}

// protectedSettings are written by the entrypoint script; replication and
// connectivity break if a tier overrides them.
var protectedSettings = map[string]bool{
	"listen_addresses": true, "port": true, "wal_level": true, "hot_standby": true,
	"max_wal_senders": true, "max_replication_slots": true, "hba_file": true,
	"data_directory": true, "config_file": true, "unix_socket_directories": true,
	"primary_conninfo": true, "primary_slot_name": true,
}

func positiveQuantity(p *field.Path, s string) (resource.Quantity, field.ErrorList) {
	// ParseQuantity takes minutes to reject "1e-999999999" (found by fuzzing).
	if wire.UnsafeQuantity(s) {
		return resource.Quantity{}, field.ErrorList{field.Invalid(p, s, "must be a Kubernetes quantity, e.g. 500m, 1Gi or 20Gi")}
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, field.ErrorList{field.Invalid(p, s, "must be a Kubernetes quantity, e.g. 500m, 1Gi or 20Gi")}
	}
	if q.Sign() <= 0 {
		return q, field.ErrorList{field.Invalid(p, s, "must be greater than zero")}
	}
	return q, nil
}

// minVolume is the smallest data or backup volume: the WAL alone may take
// roughly a quarter of the data volume (walSettings), PostgreSQL's own files
// some 40MB, and the data needs the rest; a fraction of a byte ("0.5") would
// be a volume no provisioner can make.
var minVolume = resource.MustParse("1Gi")

func volumeQuantity(p *field.Path, s string) (resource.Quantity, field.ErrorList) {
	q, errs := positiveQuantity(p, s)
	if len(errs) == 0 && q.Cmp(minVolume) < 0 {
		errs = field.ErrorList{field.Invalid(p, s, "must be at least 1Gi (room for the data and its write-ahead log)")}
	}
	return q, errs
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
