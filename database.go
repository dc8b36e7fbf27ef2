package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/internal/wire"
)

// Limits and defaults of the Database API (docs/api.md).
const (
	// maxNameLength keeps every derived name legal: StatefulSet pods carry
	// a controller-revision-hash label "N-<10 chars>" (63 max) and CronJob
	// names are limited to 52 characters, so "N-backup" caps N at 45.
	maxNameLength = 45

	defaultSchedule  = "0 2 * * *"
	defaultRetention = 7
	maxRetention     = 1000

	// Durability of commits with standbys (spec.durability): async
	// acknowledges a commit once the primary flushed it; sync once a
	// standby flushed it too (RPO 0 on failover).
	durabilityAsync = "async"
	durabilitySync  = "sync"

	deletionRetain = "Retain"
	deletionDelete = "Delete"

	restoreLatest = "latest"
	// spec.restoreFrom.from: the volume backups or the WAL archive.
	restoreFromBackups = "Backups"
	restoreFromArchive = "Archive"
	// maxRestoreAttempt bounds spec.restoreFrom.attempt (the XRDs say the
	// same): a counter raised by hand never gets near it.
	maxRestoreAttempt = 1000
)

var (
	versionPattern = regexp.MustCompile(`^([0-9]+)(?:\.(0|[1-9][0-9]*))?$`)
	namePattern    = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	backupPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	settingName    = regexp.MustCompile(`^[a-z][a-z0-9_.]*$`)
)

// databaseSpec is the wire form of a Database's spec (example/xrd.yaml). Optional
// scalars are pointers so that "absent" and "zero" stay distinct.
type databaseSpec struct {
	Version        string       `json:"version"`
	Size           string       `json:"size"`
	Storage        *storageSpec `json:"storage,omitempty"`
	Backup         *backupSpec  `json:"backup,omitempty"`
	DeletionPolicy string       `json:"deletionPolicy,omitempty"`
	RestoreFrom    *restoreSpec `json:"restoreFrom,omitempty"`
	Durability     string       `json:"durability,omitempty"`
	Primary        *int64       `json:"primary,omitempty"`

	// BackupEnabled and BackupSchedule are the original Database CRD's
	// spellings of backup.enabled and backup.schedule (issue 16), kept so
	// that its manifests keep their backups; deprecated.
	BackupEnabled  *bool   `json:"backup_enabled,omitempty"`
	BackupSchedule *string `json:"backup_schedule,omitempty"`
}

type storageSpec struct {
	Size             string `json:"size,omitempty"`
	StorageClassName string `json:"storageClassName,omitempty"`
}

type backupSpec struct {
	Enabled   *bool  `json:"enabled,omitempty"`
	Schedule  string `json:"schedule,omitempty"`
	Retention *int64 `json:"retention,omitempty"`
	Storage   string `json:"storage,omitempty"`
}

type restoreSpec struct {
	Database string `json:"database"`
	// Namespace is the source's namespace, when it is another (from
	// Archive only, where the platform's input allows it).
	Namespace string `json:"namespace,omitempty"`
	Backup    string `json:"backup,omitempty"`
	// From is Backups (the volume dumps, a restore Job) or Archive (the
	// WAL archive in object storage, restored by the first primary
	// itself: archive.go); PointInTime the archive's point to restore to
	// (RFC 3339), empty for its end.
	From        string `json:"from,omitempty"`
	PointInTime string `json:"pointInTime,omitempty"`
	// Attempt asks for a new run of a restore that did not complete: a
	// value other than the one the restore Job ran with replaces the Job
	// (restore.go). It does nothing once the restore completed.
	Attempt int64 `json:"attempt,omitempty"`
}

// pgVersion is a PostgreSQL version as the user asked for it: a major, or a
// major.minor. Tag is the image tag, exactly what the user wrote.
type pgVersion struct {
	Major int
	Tag   string
}

// database is a Database resolved against its tier and the function input:
// everything the builders need, validated, with every default applied.
type database struct {
	// Name is N, the stem of every composed name: the XR's name, or the
	// claim's name for a legacy XR (whose own name has a random suffix).
	Name      string
	Namespace string
	// SQLName is the app role and database: N with '-' turned into '_', so
	// that it is a plain SQL identifier needing no quotes in clients.
	SQLName string
	Legacy  bool
	// APIVersion and Kind are the XR's: a restoreFrom source is a Database
	// of the same kind, looked up through Crossplane's required resources.
	APIVersion, Kind string
	// Deprecated lists the deprecated spellings the spec uses, each with
	// the field to move to, for the SpecApplied condition.
	Deprecated []deprecatedField

	Version          pgVersion
	Size             string
	Tier             tier
	Storage          resource.Quantity
	StorageClassName string
	// Explicit records which volume fields spec sets: only those are
	// reported when they differ from the volumes that exist; the tier's and
	// the input's defaults apply at creation only.
	Explicit       explicitVolumes
	Backup         backup
	DeletionPolicy string
	RestoreFrom    *restoreSpec
	Durability     string
	// Primary is spec.primary: the ordinal that should be the primary (a
	// planned switchover moves it there); nil leaves it where it is.
	Primary *int
	// Failover and FailoverGrace come from the function input.
	Failover      bool
	FailoverGrace int32
	// SpreadNodes is the input's spread.nodes ("" unset; plan.go).
	SpreadNodes string
	// DeferUpdates is the input's updates.policy Deferred (roll.go).
	DeferUpdates bool
	// Metrics is the input's metrics; nil adds no exporter (metrics.go).
	Metrics *metricsConfig
	// ObjectStorage is where the WAL is archived (archive.go); nil when
	// the input names no bucket.
	ObjectStorage *objectStorage

	Image             string
	Images            map[string]string
	ClusterDomain     string
	NetworkPolicy     bool
	AllowedNamespaces []string
}

type explicitVolumes struct {
	Size, Class, BackupSize bool
}

// deprecatedField is a field of the spec set under its deprecated name.
type deprecatedField struct {
	Old, New string
	// Value is the value as the new field would hold it, in YAML.
	Value string
}

type backup struct {
	Enabled   bool
	Schedule  string
	Retention int64
	Storage   resource.Quantity
}

// xrMeta is what the function reads of the observed XR's metadata.
type xrMeta struct {
	APIVersion, Kind string
	Name, Namespace  string
	Labels           map[string]string
}

func readXRMeta(xr *structpb.Struct) xrMeta {
	m := xrMeta{
		APIVersion: stringAt(xr, "apiVersion"),
		Kind:       stringAt(xr, "kind"),
		Name:       stringAt(xr, "metadata", "name"),
		Namespace:  stringAt(xr, "metadata", "namespace"),
		Labels:     map[string]string{},
	}
	if l := structAt(xr, "metadata", "labels"); l != nil {
		for k, v := range l.GetFields() {
			m.Labels[k] = v.GetStringValue()
		}
	}
	return m
}

// parseDatabase validates the observed XR and resolves it against the input.
// Every problem is reported with its field path and what is allowed.
func parseDatabase(xr *structpb.Struct, cfg *config) (*database, field.ErrorList) {
	meta := readXRMeta(xr)
	var errs field.ErrorList
	db := &database{
		Image:             cfg.Image,
		Images:            cfg.Images,
		ClusterDomain:     cfg.ClusterDomain,
		NetworkPolicy:     cfg.NetworkPolicy,
		AllowedNamespaces: cfg.AllowedNamespaces,
		Failover:          cfg.Failover,
		FailoverGrace:     cfg.FailoverGrace,
		SpreadNodes:       cfg.SpreadNodes,
		DeferUpdates:      cfg.DeferUpdates,
		Metrics:           cfg.Metrics,
		ObjectStorage:     cfg.ObjectStorage,
	}

	// A legacy XR is cluster scoped: its claim's name and namespace are the
	// ones users see, so composed names and namespace come from the claim.
	db.Name, db.Namespace = meta.Name, meta.Namespace
	db.APIVersion, db.Kind = meta.APIVersion, meta.Kind
	namePath, nsPath := field.NewPath("metadata", "name"), field.NewPath("metadata", "namespace")
	if meta.Namespace == "" {
		db.Legacy = true
		db.Name, db.Namespace = meta.Labels[labelClaimName], meta.Labels[labelClaimNamespace]
		namePath = field.NewPath("metadata", "labels").Key(labelClaimName)
		nsPath = field.NewPath("metadata", "labels").Key(labelClaimNamespace)
		if db.Namespace == "" || db.Name == "" {
			errs = append(errs, field.Required(field.NewPath("metadata", "namespace"),
				"the Database has no namespace and no crossplane.io/claim-name and claim-namespace labels: create a namespaced Database, or a claim of the legacy XRD"))
		}
	}
	if db.Namespace != "" {
		for _, m := range validation.IsDNS1123Label(db.Namespace) {
			errs = append(errs, field.Invalid(nsPath, db.Namespace, m))
		}
	}
	switch {
	case db.Name == "" && !db.Legacy:
		errs = append(errs, field.Required(namePath, "the Database has no name"))
	case db.Name != "":
		errs = append(errs, validateName(namePath, db.Name)...)
	}
	db.SQLName = strings.ReplaceAll(db.Name, "-", "_")

	specVal, ok := xr.GetFields()["spec"]
	if !ok || specVal.GetStructValue() == nil {
		return nil, append(errs, field.Required(field.NewPath("spec"), "a Database needs spec.version and spec.size"))
	}
	spec, err := decodeSpec(specVal)
	if err != nil {
		return nil, append(errs, err)
	}
	errs = append(errs, db.resolveSpec(spec, cfg)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return db, nil
}

func validateName(p *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	if len(name) > maxNameLength {
		errs = append(errs, field.TooLong(p, name, maxNameLength))
	}
	if !namePattern.MatchString(name) {
		errs = append(errs, field.Invalid(p, name, "must be lower case letters, digits and '-', starting with a letter and ending with a letter or digit"))
	}
	if reservedSQLName(name) {
		errs = append(errs, field.Invalid(p, name, fmt.Sprintf(
			"must not be %s, nor start with %q: it names the Database's SQL role and database ('-' becomes '_'), and PostgreSQL or the Database already has those; use another name, e.g. %q",
			strings.Join(reservedSQLNames, ", "), reservedSQLPrefix, strings.TrimPrefix(name, reservedSQLPrefix)+"-db")))
	}
	if s := reservedSuffix(name); s != "" {
		errs = append(errs, field.Invalid(p, name, fmt.Sprintf(
			"must not end in %q: a Database named %q composes %s, so the two would collide (names ending in %s are reserved); use another name, e.g. %q",
			s, strings.TrimSuffix(name, s), name, strings.Join(reservedSuffixes, ", "), name+"-db")))
	}
	return errs
}

// decodeSpec decodes the spec strictly by type; a wrong type is reported at
// its path. Unknown fields are allowed: Crossplane adds its own (spec.crossplane,
// spec.claimRef, spec.resourceRefs ...).
func decodeSpec(v *structpb.Value) (*databaseSpec, *field.Error) {
	if err := caseMismatch(v.GetStructValue(), reflect.TypeFor[databaseSpec](), field.NewPath("spec")); err != nil {
		return nil, err
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return nil, field.InternalError(field.NewPath("spec"), err)
	}
	spec := &databaseSpec{}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(spec); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			p := field.NewPath("spec")
			for _, s := range strings.Split(te.Field, ".") {
				p = p.Child(s)
			}
			return nil, field.Invalid(p, te.Value, "must be "+jsonKind(te.Type.Kind().String()))
		}
		return nil, field.Invalid(field.NewPath("spec"), string(b), err.Error())
	}
	return spec, nil
}

// caseMismatch reports a key of s that differs from a field of struct type t
// only in case ("Version"). encoding/json would take it for the field; the
// API server, whose schema is case-sensitive, would prune it. Neither is
// what the user meant, so it is an error that names the field. Other
// unknown keys pass: Crossplane adds its own fields to an XR's spec.
func caseMismatch(s *structpb.Struct, t reflect.Type, p *field.Path) *field.Error {
	fields := wire.JSONFields(t)
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) {
		i := slices.IndexFunc(fields, func(f wire.Field) bool { return f.Name == k })
		if i < 0 {
			if j := slices.IndexFunc(fields, func(f wire.Field) bool { return strings.EqualFold(f.Name, k) }); j >= 0 {
				return field.Invalid(p.Child(k), k, fmt.Sprintf("field names are case-sensitive: did you mean %q?", fields[j].Name))
			}
			continue
		}
		ft := t.FieldByIndex(fields[i].Index).Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if sub := s.GetFields()[k].GetStructValue(); sub != nil && ft.Kind() == reflect.Struct {
			if err := caseMismatch(sub, ft, p.Child(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"):
		return "an integer"
	case k == "bool":
		return "a boolean (true or false)"
	case k == "string":
		return "a string"
	case k == "ptr" || k == "struct":
		return "an object"
	}
	return "a " + k
}

func (db *database) resolveSpec(s *databaseSpec, cfg *config) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")

	v, err := parseVersion(spec.Child("version"), s.Version)
	if err != nil {
		errs = append(errs, err)
	}
	db.Version = v

	db.Size = s.Size
	t, ok := cfg.Tiers[s.Size]
	switch {
	case s.Size == "":
		errs = append(errs, field.Required(spec.Child("size"), "one of small, medium, large"))
	case !ok:
		errs = append(errs, field.NotSupported(spec.Child("size"), s.Size, sizes))
	}
	db.Tier = t

	db.Storage = t.Storage
	db.StorageClassName = cfg.StorageClassName
	if st := s.Storage; st != nil {
		if st.Size != "" {
			q, e := volumeQuantity(spec.Child("storage", "size"), st.Size)
			errs = append(errs, e...)
			db.Storage = q
			db.Explicit.Size = true
		}
		if st.StorageClassName != "" {
			for _, m := range validation.IsDNS1123Subdomain(st.StorageClassName) {
				errs = append(errs, field.Invalid(spec.Child("storage", "storageClassName"), st.StorageClassName, m))
			}
			db.StorageClassName = st.StorageClassName
			db.Explicit.Class = true
		}
	}

	errs = append(errs, db.resolveBackup(spec, s, t)...)

	db.DeletionPolicy = deletionRetain
	switch s.DeletionPolicy {
	case "", deletionRetain:
	case deletionDelete:
		db.DeletionPolicy = deletionDelete
	default:
		errs = append(errs, field.NotSupported(spec.Child("deletionPolicy"), s.DeletionPolicy, []string{deletionRetain, deletionDelete}))
	}

	db.Durability = durabilityAsync
	switch s.Durability {
	case "", durabilityAsync:
	case durabilitySync:
		db.Durability = durabilitySync
	default:
		errs = append(errs, field.NotSupported(spec.Child("durability"), s.Durability, []string{durabilityAsync, durabilitySync}))
	}

	if s.Primary != nil {
		if *s.Primary < 0 || *s.Primary >= maxInstances {
			errs = append(errs, field.Invalid(spec.Child("primary"), *s.Primary, fmt.Sprintf("must be an instance's ordinal, 0 to %d", maxInstances-1)))
		} else {
			db.Primary = ptr.To(int(*s.Primary))
		}
	}

	if r := s.RestoreFrom; r != nil {
		rp := spec.Child("restoreFrom")
		rs := *r
		if rs.Backup == "" {
			rs.Backup = restoreLatest
		}
		switch rs.Database {
		case "":
			errs = append(errs, field.Required(rp.Child("database"), "the name of a Database in the same namespace whose backups to restore"))
		case db.Name:
			if rs.Namespace == "" || rs.Namespace == db.Namespace {
				errs = append(errs, field.Invalid(rp.Child("database"), rs.Database, "must name another Database: a Database cannot restore its own backups at creation"))
			}
		default:
			errs = append(errs, validateName(rp.Child("database"), rs.Database)...)
		}
		if !backupPattern.MatchString(rs.Backup) {
			errs = append(errs, field.Invalid(rp.Child("backup"), rs.Backup, "must be 'latest' or a backup file name (letters, digits, '.', '_', '-')"))
		}
		switch rs.From {
		case "", restoreFromBackups:
			rs.From = restoreFromBackups
			if rs.PointInTime != "" {
				errs = append(errs, field.Invalid(rp.Child("pointInTime"), rs.PointInTime, "a point in time needs from: Archive (the WAL archive in object storage); the volume backups are points of their own (backup)"))
			}
		case restoreFromArchive:
			if db.ObjectStorage == nil {
				errs = append(errs, field.Invalid(rp.Child("from"), rs.From, "this Composition's function input names no objectStorage, so there is no archive to restore from: use from: Backups, or a Composition whose input archives to a bucket (docs/backups.md)"))
			}
			if rs.PointInTime != "" {
				t, err := time.Parse(time.RFC3339, rs.PointInTime)
				if err != nil {
					errs = append(errs, field.Invalid(rp.Child("pointInTime"), rs.PointInTime, "must be an RFC 3339 time, e.g. 2026-12-02T10:15:00Z"))
				} else {
					rs.PointInTime = t.UTC().Format(time.RFC3339Nano)
				}
			}
		default:
			errs = append(errs, field.NotSupported(rp.Child("from"), rs.From, []string{restoreFromBackups, restoreFromArchive}))
		}
		if rs.Namespace != "" && rs.Namespace != db.Namespace {
			for _, m := range validation.IsDNS1123Label(rs.Namespace) {
				errs = append(errs, field.Invalid(rp.Child("namespace"), rs.Namespace, m))
			}
			if rs.From != restoreFromArchive {
				errs = append(errs, field.Invalid(rp.Child("namespace"), rs.Namespace, "only an archive in object storage (from: Archive) can be restored from another namespace: volume backups stay in their Database's namespace"))
			}
		}
		if rs.Attempt < 0 || rs.Attempt > maxRestoreAttempt {
			errs = append(errs, field.Invalid(rp.Child("attempt"), rs.Attempt, fmt.Sprintf("must be between 0 and %d: raise it by one to run a failed restore again", maxRestoreAttempt)))
		}
		db.RestoreFrom = &rs
	}
	return errs
}

// resolveBackup resolves spec.backup, and the original CRD's flat
// backup_enabled and backup_schedule, which are the same fields.
func (db *database) resolveBackup(spec *field.Path, s *databaseSpec, t tier) field.ErrorList {
	var errs field.ErrorList
	db.Backup = backup{Schedule: defaultSchedule, Retention: defaultRetention, Storage: t.BackupStorage}
	b := s.Backup
	if b == nil {
		b = &backupSpec{}
	}
	bp := spec.Child("backup")
	enabled, e := mergeDeprecated(spec.Child("backup_enabled"), s.BackupEnabled, bp.Child("enabled"), b.Enabled)
	errs = append(errs, e...)
	if enabled != nil {
		db.Backup.Enabled = *enabled
	}
	if s.BackupEnabled != nil {
		db.Deprecated = append(db.Deprecated, deprecatedField{"spec.backup_enabled", "spec.backup.enabled", strconv.FormatBool(*s.BackupEnabled)})
	}
	flatSchedule := s.BackupSchedule
	if flatSchedule != nil {
		flatSchedule = ptrNonEmpty(*flatSchedule) // "" means unset, as in spec.backup.schedule
	}
	schedule, e := mergeDeprecated(spec.Child("backup_schedule"), flatSchedule, bp.Child("schedule"), ptrNonEmpty(b.Schedule))
	errs = append(errs, e...)
	if schedule != nil {
		// Report a bad schedule where the user wrote it.
		p := bp.Child("schedule")
		if b.Schedule == "" {
			p = spec.Child("backup_schedule")
		}
		errs = append(errs, validateSchedule(p, *schedule)...)
		db.Backup.Schedule = *schedule
	}
	if flatSchedule != nil {
		db.Deprecated = append(db.Deprecated, deprecatedField{"spec.backup_schedule", "spec.backup.schedule", strconv.Quote(*flatSchedule)})
	}
	if b.Retention != nil {
		if *b.Retention < 1 || *b.Retention > maxRetention {
			errs = append(errs, field.Invalid(bp.Child("retention"), *b.Retention, fmt.Sprintf("must be between 1 and %d (backups kept)", maxRetention)))
		}
		db.Backup.Retention = *b.Retention
	}
	if b.Storage != "" {
		q, e := volumeQuantity(bp.Child("storage"), b.Storage)
		errs = append(errs, e...)
		db.Backup.Storage = q
		db.Explicit.BackupSize = true
	}
	return errs
}

// mergeDeprecated resolves a field that has a deprecated spelling: the two
// are one field, so setting both to different values is an error naming
// both (the XRD refuses it at admission too; this guards requests that did
// not pass through it, e.g. crossplane render). A value under the deprecated
// name is recorded for the SpecApplied condition. Absent both, nil: the
// caller's default applies, the same for either spelling.
func mergeDeprecated[T comparable](oldPath *field.Path, old *T, newPath *field.Path, cur *T) (*T, field.ErrorList) {
	switch {
	case old == nil:
		return cur, nil
	case cur != nil && *cur != *old:
		return nil, field.ErrorList{field.Invalid(oldPath, *old, fmt.Sprintf(
			"differs from %s (%#v); %s is the deprecated spelling of %s: set only %s", newPath, *cur, oldPath, newPath, newPath))}
	}
	return old, nil
}

func ptrNonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// cronParser accepts what a Kubernetes CronJob accepts: five fields or a
// descriptor such as @daily.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func validateSchedule(p *field.Path, s string) field.ErrorList {
	// The CronJob API rejects time zones inside the schedule; it has a
	// timeZone field instead.
	if strings.Contains(s, "TZ=") {
		return field.ErrorList{field.Invalid(p, s, "must not set a time zone (CRON_TZ/TZ): schedules run in the cluster's time zone")}
	}
	if strings.HasPrefix(s, "@every") {
		return field.ErrorList{field.Invalid(p, s, "@every is not supported by CronJobs: use 5-field cron or @hourly/@daily/@weekly/@monthly/@yearly")}
	}
	if _, err := cronParser.Parse(s); err != nil {
		return field.ErrorList{field.Invalid(p, s, "must be a 5-field cron schedule (minute hour day-of-month month day-of-week) or @hourly/@daily/@weekly/@monthly/@yearly: "+err.Error())}
	}
	return nil
}

func stringAt(s *structpb.Struct, path ...string) string {
	if len(path) == 0 {
		return ""
	}
	if p := structAt(s, path[:len(path)-1]...); p != nil {
		return p.GetFields()[path[len(path)-1]].GetStringValue()
	}
	return ""
}

func structAt(s *structpb.Struct, path ...string) *structpb.Struct {
	for _, k := range path {
		if s == nil {
			return nil
		}
		s = s.GetFields()[k].GetStructValue()
	}
	return s
}

// sourceNamespace is the namespace of the Database r restores from.
func (r *restoreSpec) sourceNamespace(db *database) string {
	if r.Namespace != "" {
		return r.Namespace
	}
	return db.Namespace
}
