package main

import (
	"fmt"
	"maps"
	"net"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/example/function-database/input/v1beta1"
	"github.com/example/function-database/internal/wire"
	"github.com/example/function-database/scripts"
)

// The WAL archive in object storage (docs/backups.md): every instance runs
// archive_command through scripts/pgbackrest.sh (named so: pgBackRest's
// backup checks that archive_command contains "pgbackrest"), which calls pgBackRest with the
// bucket's credentials read from the mounted Secret at each call. Only a
// primary archives (archive_mode on: a standby's archiver is idle), so the
// archive follows a failover by itself: the promoted standby starts
// archiving on its new timeline.

// objectStorageName is the Secret N-object-storage, the bucket's keys. Not a
// reserved suffix (names.go), as N-failover: no other Database composes a
// Secret of that name (a Database named N-object-storage composes
// N-object-storage-credentials), and reserving it would reject Databases
// that exist under such a name.
func objectStorageName(db *database) string { return db.Name + "-object-storage" }

// The input's objectStorage defaults and bounds.
const (
	defaultPathPrefix     = "function-database"
	defaultRegion         = "us-east-1"
	defaultArchiveTimeout = 60
	minArchiveTimeout     = 10
	maxArchiveTimeout     = 3600
	defaultCheckMinutes   = 5
	maxCheckMinutes       = 30
	defaultRetentionDays  = 7
	maxRetentionDays      = 3650

	maxRetentionFullBackups = 100

	uriStyleHost = "Host"
	uriStylePath = "Path"
)

// The keys of the platform's object storage Secret, copied into each
// Database's N-object-storage Secret (and read by pgbackrest.sh from its mount).
const (
	keyAccessKeyID     = "AWS_ACCESS_KEY_ID"
	keySecretAccessKey = "AWS_SECRET_ACCESS_KEY" //nolint:gosec // a key name, not a credential
	keyCABundle        = "ca.crt"
)

// objectStorage is the input's objectStorage, validated, with its defaults.
type objectStorage struct {
	// Host and Port are the endpoint's; Port 0 is HTTPS's 443.
	Host     string
	Port     int
	Bucket   string
	Prefix   string
	Region   string
	URIStyle string
	// SecretName and SecretNamespace name the platform's Secret.
	SecretName, SecretNamespace string
	ArchiveTimeout              int32
	// CheckMinutes is the archive check's interval.
	CheckMinutes int32
	// RetentionDays is how far back a restore reaches (pgBackRest's
	// time-based retention of full backups); RetentionFullBackups, when
	// not 0, keeps that many full backups instead (count-based).
	RetentionDays        int32
	RetentionFullBackups int32
	// DrillSchedule is the restore drill's schedule; "" when it is off.
	DrillSchedule string
	// CrossNamespace are the platform's rules for restoring another
	// namespace's archives (input crossNamespaceRestores).
	CrossNamespace []v1beta1.CrossNamespaceRestore
}

// secretRef is the platform's Secret as namespace/name: in messages, and
// on each copy as the source it came from.
func (os *objectStorage) secretRef() string {
	return os.SecretNamespace + "/" + os.SecretName
}

// anyNamespace in a crossNamespaceRestores rule matches every namespace.
const anyNamespace = "*"

// restoreAllowed tells whether a Database in namespace to may restore the
// archives of namespace from: its own always, another's only by a rule.
func (os *objectStorage) restoreAllowed(from, to string) bool {
	if from == to {
		return true
	}
	for _, r := range os.CrossNamespace {
		if (r.From == anyNamespace || r.From == from) && (r.To == anyNamespace || r.To == to) {
			return true
		}
	}
	return false
}

// forbiddenRestore refuses a restore from another namespace's archive that
// the platform's rules do not allow: until the Database was first ready
// (its record absent) the function composes nothing for it, rather than an
// empty database where a restore was asked for. A restore done stays done
// if a rule is removed later.
func forbiddenRestore(db *database, o *observed) error {
	r := db.RestoreFrom
	if r == nil || r.From != restoreFromArchive || db.ObjectStorage == nil || initialized(o) ||
		(o.RestoreRecord != nil && o.RestoreRecord.Completed) {
		return nil
	}
	from := r.sourceNamespace(db)
	if db.ObjectStorage.restoreAllowed(from, db.Namespace) {
		return nil
	}
	return fmt.Errorf("spec.restoreFrom.namespace: restoring the archive of %s/%s into namespace %s is not allowed by the platform: "+
		"the Composition's function input has no objectStorage.crossNamespaceRestores rule from %s to %s (ask the platform team, or restore a Database of this namespace); nothing is composed until then",
		from, r.Database, db.Namespace, from, db.Namespace)
}

var (
	// bucketPattern is S3's bucket naming rule (lowercase letters, digits,
	// dots and hyphens, 3-63 characters, a letter or digit at both ends).
	bucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	// prefixPattern is one or more folders: no empty segment, no "..".
	prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$`)
	regionPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
)

// resolveObjectStorage validates the input's objectStorage: every problem
// names its field and what is allowed.
func resolveObjectStorage(p *field.Path, in *v1beta1.ObjectStorage) (*objectStorage, field.ErrorList) {
	var errs field.ErrorList
	os := &objectStorage{
		Bucket:          in.Bucket,
		Prefix:          or(strings.Trim(in.PathPrefix, "/"), defaultPathPrefix),
		Region:          or(in.Region, defaultRegion),
		URIStyle:        or(in.URIStyle, uriStyleHost),
		SecretName:      in.SecretRef.Name,
		SecretNamespace: in.SecretRef.Namespace,
		ArchiveTimeout:  defaultArchiveTimeout,
		CheckMinutes:    defaultCheckMinutes,
		RetentionDays:   defaultRetentionDays,
	}
	os.Host, os.Port, errs = parseEndpoint(p.Child("endpoint"), in.Endpoint)
	if !bucketPattern.MatchString(in.Bucket) || strings.Contains(in.Bucket, "..") {
		errs = append(errs, field.Invalid(p.Child("bucket"), in.Bucket, "must be an S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"))
	}
	if !prefixPattern.MatchString(os.Prefix) || strings.Contains(os.Prefix, "..") {
		errs = append(errs, field.Invalid(p.Child("pathPrefix"), in.PathPrefix, "must be folder names (letters, digits, '.', '_', '-') separated by '/'"))
	}
	if !regionPattern.MatchString(os.Region) {
		errs = append(errs, field.Invalid(p.Child("region"), in.Region, "must be a region name such as us-east-1"))
	}
	if os.URIStyle != uriStyleHost && os.URIStyle != uriStylePath {
		errs = append(errs, field.NotSupported(p.Child("uriStyle"), in.URIStyle, []string{uriStyleHost, uriStylePath}))
	}
	ref := p.Child("secretRef")
	for _, m := range validation.IsDNS1123Subdomain(in.SecretRef.Name) {
		errs = append(errs, field.Invalid(ref.Child("name"), in.SecretRef.Name, m))
	}
	for _, m := range validation.IsDNS1123Label(in.SecretRef.Namespace) {
		errs = append(errs, field.Invalid(ref.Child("namespace"), in.SecretRef.Namespace, m))
	}
	if t := in.ArchiveTimeoutSeconds; t != nil {
		if *t < minArchiveTimeout || *t > maxArchiveTimeout {
			errs = append(errs, field.Invalid(p.Child("archiveTimeoutSeconds"), *t, "must be between "+strconv.Itoa(minArchiveTimeout)+" and "+strconv.Itoa(maxArchiveTimeout)+" seconds"))
		}
		os.ArchiveTimeout = *t
	}
	if m := in.CheckMinutes; m != nil {
		if *m < 1 || *m > maxCheckMinutes {
			errs = append(errs, field.Invalid(p.Child("checkMinutes"), *m, "must be between 1 and "+strconv.Itoa(maxCheckMinutes)+" minutes"))
		}
		os.CheckMinutes = *m
	}
	if d := in.RetentionDays; d != nil {
		if *d < 1 || *d > maxRetentionDays {
			errs = append(errs, field.Invalid(p.Child("retentionDays"), *d, "must be between 1 and "+strconv.Itoa(maxRetentionDays)+" days"))
		}
		os.RetentionDays = *d
	}
	if n := in.RetentionFullBackups; n != nil {
		switch {
		case in.RetentionDays != nil:
			errs = append(errs, field.Forbidden(p.Child("retentionFullBackups"), "set retentionDays or retentionFullBackups, not both: pgBackRest keeps full backups by age or by count"))
		case *n < 1 || *n > maxRetentionFullBackups:
			errs = append(errs, field.Invalid(p.Child("retentionFullBackups"), *n, "must be between 1 and "+strconv.Itoa(maxRetentionFullBackups)))
		}
		os.RetentionDays, os.RetentionFullBackups = 0, *n
	}
	for i, r := range in.CrossNamespaceRestores {
		rp := p.Child("crossNamespaceRestores").Index(i)
		for _, f := range []struct {
			name, v string
		}{{"from", r.From}, {"to", r.To}} {
			if f.v == anyNamespace {
				continue
			}
			for _, m := range validation.IsDNS1123Label(f.v) {
				errs = append(errs, field.Invalid(rp.Child(f.name), f.v, "must be a namespace or '*': "+m))
			}
		}
	}
	os.CrossNamespace = in.CrossNamespaceRestores
	os.DrillSchedule = defaultDrillSchedule
	if d := in.Drill; d != nil {
		if d.Schedule != "" {
			os.DrillSchedule = d.Schedule
			errs = append(errs, validateSchedule(p.Child("drill", "schedule"), d.Schedule)...)
		}
		if d.Enabled != nil && !*d.Enabled {
			os.DrillSchedule = ""
		}
	}
	return os, errs
}

// parseEndpoint splits host[:port]. A scheme is refused rather than
// stripped: the archive is always HTTPS, and "http://" would say otherwise.
func parseEndpoint(p *field.Path, endpoint string) (string, int, field.ErrorList) {
	if strings.Contains(endpoint, "://") || strings.Contains(endpoint, "/") {
		return "", 0, field.ErrorList{field.Invalid(p, endpoint, "must be host or host:port, without a scheme or a path (the archive always uses HTTPS)")}
	}
	host, port := endpoint, 0
	if h, ps, err := net.SplitHostPort(endpoint); err == nil {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, field.ErrorList{field.Invalid(p, endpoint, "the port must be a number from 1 to 65535")}
		}
		host, port = h, n
	}
	if net.ParseIP(host) == nil {
		if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
			return "", 0, field.ErrorList{field.Invalid(p, endpoint, "the host must be a DNS name or an IP address: "+strings.Join(msgs, "; "))}
		}
	}
	return host, port, nil
}

// archiveSettings are the settings that turn archiving on. archive_mode
// needs a restart (a roll, once, when a platform first names a bucket);
// archive_command and archive_timeout are reloaded.
func archiveSettings(db *database) map[string]string {
	return map[string]string{
		"archive_mode":    "on",
		"archive_command": "bash " + scriptsDir + "/" + scripts.Archive + " push %p",
		"archive_timeout": strconv.Itoa(int(db.ObjectStorage.ArchiveTimeout)) + "s",
	}
}

// pgbackrestStanza is the one stanza of a Database's repository: the
// repository's path is the Database's own (repo1-path), so one name serves.
const pgbackrestStanza = "db"

// pgbackrestConf is pgBackRest's configuration, shipped in the scripts
// ConfigMap (key pgbackrest.conf). No secret is in it: pgbackrest.sh passes
// the keys from the mounted Secret in pgBackRest's environment variables.
// queueMax bounds the WAL waiting in pg_wal for an unreachable bucket:
// beyond it pgBackRest drops segments (the archive then has a gap, and the
// next base backup starts a new chain) rather than fill the data volume.
func pgbackrestConf(db *database, p *plan, hasCA bool) string {
	os := db.ObjectStorage
	uri := "host"
	if os.URIStyle == uriStylePath {
		uri = "path"
	}
	lines := []string{
		"# pgBackRest for " + db.Namespace + "/" + db.Name + ", written by function-database.",
		"[global]",
		"repo1-type=s3",
		"repo1-s3-endpoint=" + os.Host,
		"repo1-s3-bucket=" + os.Bucket,
		"repo1-s3-region=" + os.Region,
		"repo1-s3-uri-style=" + uri,
		"repo1-path=" + repoPath(os, db.Namespace, db.Name),
	}
	if os.Port != 0 {
		lines = append(lines, "repo1-storage-port="+strconv.Itoa(os.Port))
	}
	if hasCA {
		lines = append(lines, "repo1-storage-ca-file="+objectStorageDir+"/"+keyCABundle)
	}
	lines = append(lines,
		"archive-async=y",
		"spool-path="+dataDir+"/pgbackrest-spool",
		"archive-push-queue-max="+strconv.FormatInt(archiveQueueMax(dataVolume(p)), 10)+"MiB",
		"lock-path="+tmpDir+"/pgbackrest",
		"log-level-console=warn",
		"log-level-stderr=off",
		"log-level-file=off",
		"start-fast=y",
		// A push waits this long for the asynchronous process before
		// failing, and an unreachable bucket's segments are dropped past
		// the queue only when that process runs again: half the default
		// (60 s) halves how long WAL can pile up first.
		"archive-timeout=30",
		// No byte for this long is a stalled connection. The default
		// (60 s, with retries) kept the asynchronous process alive for
		// minutes against an endpoint that stopped answering, and the
		// queue bound, checked only when a new one starts, never acted:
		// pg_wal reached 1.4 GB on a 1 GiB volume in TestBackups.
		"io-timeout=15",
		// By age: the full backups a restore to any point of the last
		// RetentionDays days needs (the newest one older than that, and
		// every later one), and the WAL after the oldest kept; or by
		// count (RetentionFullBackups). Expired after each backup.
		"repo1-retention-full-type="+retentionType(os),
		"repo1-retention-full="+strconv.Itoa(int(max(os.RetentionDays, os.RetentionFullBackups))),
		// full-backup.sh's request and the sidecar's answer (pgbackrest.sh
		// full) live in the primary's data directory: a copy restored from
		// a backup must not take them up.
		"exclude=database.full-backup-request",
		"exclude=database.full-backup",
		"exclude=database.full-backup.tmp",
		"compress-type=lz4",
		// Small files bundled into a few objects: a backup of a small
		// database is some 1,300 files, and each is a request to the
		// bucket (39 s for 29 MB in TestBackups before, a few seconds
		// after). Files over the bundle limit (2 MiB) stay separate.
		"repo1-bundle=y",
		"",
		"["+pgbackrestStanza+"]",
		"pg1-path="+pgData,
		"pg1-port="+strconv.Itoa(postgresPort),
		"pg1-socket-path="+socketDir,
		"pg1-user="+superuser,
		"",
	)
	return strings.Join(lines, "\n")
}

// retentionType is pgBackRest's repo1-retention-full-type: by age unless
// the input keeps a count of full backups.
func retentionType(os *objectStorage) string {
	if os.RetentionFullBackups > 0 {
		return "count"
	}
	return "time"
}

// repoPath is the repository of Database name in namespace ns in the bucket.
func repoPath(os *objectStorage, ns, name string) string {
	return "/" + os.Prefix + "/" + ns + "/" + name
}

// archiveRestoreKeys are the scripts ConfigMap's keys that make the first
// primary restore from an archive (entrypoint.sh restore_primary): written
// while the Database was never ready only, so that no later start restores
// over data.
func archiveRestoreKeys(db *database, p *plan, data map[string]string) {
	r := db.RestoreFrom
	if r == nil || r.From != restoreFromArchive || db.ObjectStorage == nil || p.Initialized || p.Restore == nil || !p.Restore.Pending {
		return
	}
	data[keyRestoreRepo] = repoPath(db.ObjectStorage, r.sourceNamespace(db), r.Database)
	data[keyRestoreSource] = strings.ReplaceAll(r.Database, "-", "_")
	if r.PointInTime != "" {
		t, _ := time.Parse(time.RFC3339Nano, r.PointInTime) // validated in parseSpec
		// pgBackRest reads this form to pick the backup before the
		// target (it takes no 'T'); postgres reads it too.
		data[keyRestoreTarget] = t.UTC().Format("2006-01-02 15:04:05.999999-07")
	}
}

// planArchiveRestore is planRestore for spec.restoreFrom from Archive: no
// Job; the first primary restores itself (archiveRestoreKeys), and the
// Database's first readiness is the restore's completion.
func planArchiveRestore(db *database, p *plan, o *observed) (*restorePlan, []blocked) {
	spec, rec := db.RestoreFrom, o.RestoreRecord
	want := restoreStatus{Source: spec.Database, Backup: archiveBackup, PointInTime: spec.PointInTime}
	if ns := spec.sourceNamespace(db); ns != db.Namespace {
		want.Namespace = ns
	}
	to := "its end"
	if spec.PointInTime != "" {
		to = spec.PointInTime
	}
	where := "s3://" + db.ObjectStorage.Bucket + repoPath(db.ObjectStorage, spec.sourceNamespace(db), spec.Database)
	switch {
	case rec != nil && rec.Completed:
		var b []blocked
		if rec.Source != want.Source || rec.Namespace != want.Namespace || rec.Backup != want.Backup || rec.PointInTime != want.PointInTime {
			b = append(b, blocked{reasonRestoreAfterCreate, fmt.Sprintf(
				"spec.restoreFrom names the archive of %s to %s, but %s/%s%s was restored: a restore runs once, at creation, and never over data; create a new Database to restore again",
				sourceOf(&want), to, sourceOf(rec), rec.Backup, pointOf(rec))})
		}
		return restoredPlan(rec, nil), b
	case p.Initialized && rec == nil:
		return nil, []blocked{{reasonRestoreAfterCreate, "spec.restoreFrom was set after the database was created; a restore runs only at creation and never over existing data. Create a new Database restoring from " + spec.Database}}
	case p.Initialized:
		// Ready once: the first primary restored, replayed and promoted
		// before it could be. What it reached is in its pod's status (the
		// termination message of its first run): asked for on this
		// reconcile only, recorded, never asked for again.
		sel := podSelector(db, instanceLabels(db))
		rep := o.RestoreReport
		if !rep.Resolved {
			return &restorePlan{Status: &want, RequireInstances: sel, Condition: condition{condRestored, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonRestoreFromArchive,
				"the first primary restored the archive of " + sourceOf(&want) + "; reading what it reached from its pod"}}, nil
		}
		st := want
		st.Completed = true
		if r := rep.Report; r != nil {
			st.RestoredTo, st.LSN, st.Timeline = r.RestoredTo, r.LSN, r.Timeline
			if r.Gap() {
				st.StoppedIn, st.ArchiveEnd = r.StoppedIn, r.ArchiveEnd
			}
		}
		return restoredPlan(&st, sel), nil
	}
	return &restorePlan{Status: &want, Pending: true, Condition: condition{condRestored, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonRestoreFromArchive,
		"the first primary restores the archive of " + sourceOf(&want) + " (" + where + ") to " + to + ": the newest full backup before it, then the WAL up to it; the Database is ready once replayed (a target the archive does not reach holds the pod, saying so)"}}, nil
}

// archiveBackup is status.restore.backup of a restore from the archive.
const archiveBackup = "archive"

const reasonRestoreFromArchive = "RestoringFromArchive"

// sourceOf names the restored Database, with its namespace when it is
// another one's.
func sourceOf(st *restoreStatus) string {
	if st.Namespace != "" {
		return st.Namespace + "/" + st.Source
	}
	return st.Source
}

func pointOf(st *restoreStatus) string {
	if st.PointInTime == "" {
		return " (to the archive's end)"
	}
	return " to " + st.PointInTime
}

// restoredPlan: a restore from the archive done (recorded, or recorded
// now); a gap it stopped at is warned about once.
func restoredPlan(st *restoreStatus, sel *fnv1.ResourceSelector) *restorePlan {
	rp := &restorePlan{Status: st, RequireInstances: sel, Condition: archiveRestored(st)}
	if g := gapMessage(st); g != "" {
		rp.Warnings = []warning{{reasonRestoreStoppedAtGap, g}}
	}
	return rp
}

// reasonRestoreStoppedAtGap: Restored True, but the replay to the archive's
// end stopped at a missing segment.
const reasonRestoreStoppedAtGap = "StoppedAtGap"

// gapMessage says what a restore to the archive's end that stopped at a gap
// did not restore, or nothing.
func gapMessage(st *restoreStatus) string {
	if st.StoppedIn == "" || st.ArchiveEnd == "" {
		return ""
	}
	return "the replay stopped in WAL segment " + st.StoppedIn + ", but the archive held segments up to " + st.ArchiveEnd +
		": one in between is missing (WAL the source dropped while its bucket could not be reached, with no full backup after the gap), so the writes archived after it were not restored." +
		" Nothing can replay them from this archive: the source Database, if it still runs, has them"
}

func archiveRestored(st *restoreStatus) condition {
	msg := "restored the archive of " + sourceOf(st) + pointOf(st)
	switch {
	case st.LSN == "":
		msg += "; what the replay reached was not reported (the first primary's container restarted again before it was read; its log says)"
	case st.RestoredTo == "":
		msg += ": no transaction was replayed after the backup; timeline " + strconv.FormatInt(st.Timeline, 10) + " starts at " + st.LSN
	default:
		msg += ": the last transaction replayed committed at " + st.RestoredTo + "; timeline " + strconv.FormatInt(st.Timeline, 10) + " starts at " + st.LSN
	}
	if g := gapMessage(st); g != "" {
		return condition{condRestored, fnv1.Status_STATUS_CONDITION_TRUE, reasonRestoreStoppedAtGap, msg + "; but " + g}
	}
	return condition{condRestored, fnv1.Status_STATUS_CONDITION_TRUE, reasonRestoreSucceeded, msg}
}

// restoreReport is the first primary's report of a restore from the
// archive (entrypoint.sh restore_primary): its termination message.
type restoreReport struct {
	// Resolved: the instance pods were read.
	Resolved bool
	Report   *scripts.RestoreReport
}

// lookupRestoreReport reads the report from the postgres container of pod
// (ordinal 0): its current state when it just ended, else its last one.
func lookupRestoreReport(req *fnv1.RunFunctionRequest, pod string) restoreReport {
	rs, ok := req.GetRequiredResources()[requirementInstances]
	if !ok {
		return restoreReport{}
	}
	out := restoreReport{Resolved: true}
	for _, r := range rs.GetItems() {
		p := r.GetResource()
		if stringAt(p, "metadata", "name") != pod {
			continue
		}
		for _, last := range []bool{false, true} {
			if rep := decodeReport(terminationMessage(p, containerPostgres, last), func(r *scripts.RestoreReport) bool { return r.Result == scripts.Restored && r.LSN != "" }); rep != nil {
				out.Report = rep
				return out
			}
		}
	}
	return out
}

// archiveQueueMax is an eighth of the data volume in MiB, at least 64: with
// max_wal_size at a quarter and the slots' bound at an eighth (walSettings),
// WAL stays within half the volume when the bucket cannot be reached.
func archiveQueueMax(volume resource.Quantity) int64 {
	return max(64, (volume.Value()>>20)/8)
}

// objectStorageSecret copies the platform's Secret's keys beside the
// Database: pods can mount only Secrets of their own namespace. Nil when
// the source is not (yet) known: the pods mount N-object-storage as
// optional, and pgbackrest.sh fails each push (WAL waits, bounded) until it
// exists.
func objectStorageSecret(db *database, src map[string][]byte) *corev1.Secret {
	if src == nil {
		return nil
	}
	data := make(map[string][]byte, 3)
	for _, k := range []string{keyAccessKeyID, keySecretAccessKey, keyCABundle} {
		if v, ok := src[k]; ok {
			data[k] = v
		}
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        objectStorageName(db),
			Namespace:   db.Namespace,
			Labels:      labels(db, componentBackup),
			Annotations: map[string]string{annotationObjectStorageSource: db.ObjectStorage.secretRef()},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// objectStorageVolume mounts N-object-storage. Optional: a missing Secret
// must not keep a primary from starting; archiving waits for it instead.
func objectStorageVolume(db *database) corev1.Volume {
	return corev1.Volume{Name: volObjectStorage, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  objectStorageName(db),
		DefaultMode: ptr.To[int32](secretsMode),
		Optional:    ptr.To(true),
	}}}
}

// objectStorageSelector asks Crossplane for the platform's Secret.
func objectStorageSelector(os *objectStorage) *fnv1.ResourceSelector {
	return &fnv1.ResourceSelector{
		ApiVersion: "v1", Kind: "Secret", Namespace: ptr.To(os.SecretNamespace),
		Match: &fnv1.ResourceSelector_MatchName{MatchName: os.SecretName},
	}
}

// objectStorageLookup is what the required resources say of the platform's
// Secret: Resolved once Crossplane answered, Data nil when it is missing.
type objectStorageLookup struct {
	Resolved bool
	Data     map[string][]byte
}

// secretData is what the function reads of the platform's Secret.
var secretData = wire.Fields{"data": nil}

// lookupObjectStorage reads the platform's Secret from the request.
// Crossplane sends Secret data base64-encoded, as the API server does.
func lookupObjectStorage(req *fnv1.RunFunctionRequest) objectStorageLookup {
	rs, ok := req.GetRequiredResources()[requirementObjectStorage]
	if !ok {
		return objectStorageLookup{}
	}
	out := objectStorageLookup{Resolved: true}
	for _, r := range rs.GetItems() {
		var s corev1.Secret
		if err := wire.Decode(r.GetResource(), secretData, &s); err != nil {
			continue
		}
		out.Data = maps.Clone(s.Data)
		if out.Data == nil {
			out.Data = map[string][]byte{}
		}
	}
	return out
}

// archivePlan is what happens about the WAL archive: the Secret to compose,
// and the WALArchive condition.
type archivePlan struct {
	// Secret is N-object-storage: the platform's Secret's keys, or the
	// observed copy while the platform's Secret is missing (never dropped:
	// deleting it would stop the archive of every Database at once).
	Secret    *corev1.Secret
	Condition condition
	// Require asks Crossplane for the platform's Secret, nil when the
	// observed copy settles it (needsSource).
	Require *fnv1.ResourceSelector
}

// The WALArchive condition's reasons.
const (
	reasonArchiveSecretAbsent = "ObjectStorageSecretMissing"
	reasonArchiveSecretKeys   = "ObjectStorageSecretIncomplete"
)

func planArchive(db *database, o *observed) *archivePlan {
	os := db.ObjectStorage
	if os == nil {
		return nil
	}
	ref := os.secretRef()
	where := "s3://" + os.Bucket + "/" + os.Prefix + "/" + db.Namespace + "/" + db.Name
	a := &archivePlan{}
	src := o.ObjectStorageSource
	switch {
	case src.Data != nil:
		a.Secret = objectStorageSecret(db, src.Data)
	case o.ObjectStorage != nil:
		a.Secret = objectStorageSecret(db, o.ObjectStorage.Data)
	}
	var missing []string
	for _, k := range []string{keyAccessKeyID, keySecretAccessKey} {
		if a.Secret == nil || len(a.Secret.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	switch {
	case src.Resolved && src.Data == nil:
		msg := "the object storage Secret " + ref + " (input.objectStorage.secretRef) does not exist: create it with keys " + keyAccessKeyID + " and " + keySecretAccessKey
		if a.Secret != nil {
			msg += "; the copy " + objectStorageName(db) + " is kept meanwhile"
		} else {
			msg += "; until then no WAL is archived (it waits in pg_wal, up to archive-push-queue-max)"
		}
		a.Condition = condition{condWALArchive, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveSecretAbsent, msg}
	case len(missing) > 0 && (src.Resolved || a.Secret != nil):
		a.Condition = condition{condWALArchive, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveSecretKeys,
			"the object storage Secret " + ref + " has no " + strings.Join(missing, " and ") + ": no WAL can be archived to " + where + " until it has"}
	default:
		a.Condition = archiveCheckCondition(db, o.ArchiveCheck, where)
	}
	if needsSource(db, o) {
		a.Require = objectStorageSelector(os)
	}
	return a
}

// needsSource tells whether the platform's Secret must be read on this
// reconcile. Reading it costs Crossplane a second call of the function on
// every reconcile (notes/issue-26.md), so it is read only while the observed
// state cannot settle the copy: no copy yet, a copy of another Secret (the
// secretRef changed), a copy short of a key, or an archive whose last check
// did not pass (credentials rotated in place and the old ones revoked: the
// failing check brings the new ones). A rotation in place whose old keys
// still work reaches the copy when they stop working; a Secret under a new
// name (secretRef) reaches it at once. The answer depends on the observed
// composed resources only, never on the required resource itself, so the
// two calls of one reconcile ask for the same thing.
func needsSource(db *database, o *observed) bool {
	c := o.ObjectStorage
	if c == nil || c.Annotations[annotationObjectStorageSource] != db.ObjectStorage.secretRef() {
		return true
	}
	for _, k := range []string{keyAccessKeyID, keySecretAccessKey} {
		if len(c.Data[k]) == 0 {
			return true
		}
	}
	return archiveCheckCondition(db, o.ArchiveCheck, "").Status != fnv1.Status_STATUS_CONDITION_TRUE
}

// hasCA tells whether the composed copy carries a CA bundle for the
// endpoint's certificate.
func (a *archivePlan) hasCA() bool {
	return a != nil && a.Secret != nil && len(a.Secret.Data[keyCABundle]) > 0
}

// The archive check (N-wal): a CronJob that asks the primary whether its
// archiver keeps up (scripts/archive-check.sh) and ends with the answer, so
// that the CronJob's status tells the WALArchive condition whether the
// archive works: the function has no clock and reads no bucket, and a pod's
// readiness cannot carry it (a sidecar not ready takes the whole pod out of
// its Services and starts a failover).
const (
	// archiveStuckSeconds is how long a segment may wait to be archived.
	archiveStuckSeconds = 300
)

// archiveCheckName is the CronJob N-wal: CronJob names are limited to 52
// characters and N to 45. Not reserved, as N-failover.
func archiveCheckName(db *database) string { return db.Name + "-wal" }

// archiveCheckSchedule: a failing archive is a condition within the input's
// checkMinutes (plus a reconcile).
func archiveCheckSchedule(os *objectStorage) string {
	return "*/" + strconv.Itoa(int(os.CheckMinutes)) + " * * * *"
}

func archiveCheckCronJob(db *database, p *plan) *batchv1.CronJob {
	env := append(adminEnv(db), corev1.EnvVar{Name: scripts.EnvStuckSeconds, Value: strconv.Itoa(archiveStuckSeconds)})
	c, vols := sqlScriptPod(containerArchiveCheck, p.Image, scripts.ArchiveCheck, env, db)
	return cronJob(db, scheduled{
		name: archiveCheckName(db), component: componentArchiveCheck, schedule: archiveCheckSchedule(db.ObjectStorage),
		startingDeadline: int64(db.ObjectStorage.CheckMinutes) * 60,
		history:          1,
		// One attempt: the next run is the retry, and a failure must reach
		// the CronJob's status, not be retried away.
		attempts:       1,
		activeDeadline: 120,
		container:      c,
		volumes:        vols,
	})
}

// The WALArchive condition's reasons from the check.
const (
	reasonArchiveNotChecked = "NotCheckedYet"
	reasonArchiveKeepsUp    = "Archiving"
	reasonArchiveFailing    = "ArchiveFailing"
)

// archiveCheckCondition reads the check CronJob's status: its last run
// succeeded (True), failed (False), or none has run (Unknown). While a run
// is active the previous verdict stands: the previous run, scheduled one
// interval before the current one, succeeded when the last success (a
// completion time) is not before that schedule. A minute of slack here once
// let a success from two runs back stand for the failed run in between
// (checkMinutes 1): WALArchive said True while the archive had a gap, and a
// restore from it stopped before the gap (e2e TestBackups, session 18).
func archiveCheckCondition(db *database, cj *batchv1.CronJob, where string) condition {
	if cj == nil || cj.Status.LastScheduleTime == nil {
		return condition{condWALArchive, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonArchiveNotChecked,
			"the primary archives its WAL to " + where + "; the first check (CronJob " + archiveCheckName(db) + ", every " + strconv.Itoa(int(db.ObjectStorage.CheckMinutes)) + " minutes) has not run yet"}
	}
	sched, succ := cj.Status.LastScheduleTime, cj.Status.LastSuccessfulTime
	ok := succ != nil && !succ.Before(sched)
	if !ok && len(cj.Status.Active) > 0 && succ != nil {
		ok = !succ.Time.Before(sched.Add(-time.Duration(db.ObjectStorage.CheckMinutes) * time.Minute))
	}
	if ok {
		return condition{condWALArchive, fnv1.Status_STATUS_CONDITION_TRUE, reasonArchiveKeepsUp,
			"the primary archives its WAL to " + where + ": the check at " + stamp(succ) + " found no failed attempt and no segment waiting over " + strconv.Itoa(archiveStuckSeconds) + " s"}
	}
	if len(cj.Status.Active) > 0 && succ == nil {
		// Running, and no run ever succeeded: the first one, or one after
		// failures; either way no verdict yet.
		return condition{condWALArchive, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonArchiveNotChecked,
			"a check of the archive to " + where + " is running; none has succeeded yet"}
	}
	msg := "the check scheduled at " + stamp(sched) + " found the archive to " + where + " failing or behind (its Job's log says which: failed attempts, a segment waiting, archive_mode off)"
	if succ != nil {
		msg += "; last good check at " + stamp(succ)
	}
	return condition{condWALArchive, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveFailing,
		msg + ". While it fails, WAL waits in pg_wal up to an eighth of the data volume, then is dropped (a gap in the archive)"}
}
