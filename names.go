package main

import (
	"slices"
	"strconv"
	"strings"

	"github.com/crossplane/function-sdk-go/resource"
)

// Composition resource names: the keys of the desired composed resources,
// stable across versions because Crossplane matches observed to desired by
// them. Renaming one makes Crossplane delete and re-create that resource.
const (
	rnCredentials     resource.Name = "credentials"
	rnSuperuser       resource.Name = "superuser"
	rnScripts         resource.Name = "scripts"
	rnStatefulSet     resource.Name = "statefulset"
	rnService         resource.Name = "service"
	rnServiceRead     resource.Name = "service-read"
	rnServiceHeadless resource.Name = "service-headless"
	rnPDB             resource.Name = "pdb"
	rnNetworkPolicy   resource.Name = "networkpolicy"
	rnBackup          resource.Name = "backup"
	rnRestore         resource.Name = "restore"
	rnFailover        resource.Name = "failover"
	rnObjectStorage   resource.Name = "object-storage"
	rnArchiveCheck    resource.Name = "archive-check"
	rnDrill           resource.Name = "drill"
	rnFullBackup      resource.Name = "full-backup"
	rnPodMonitor      resource.Name = "podmonitor"
	rnPrometheusRule  resource.Name = "prometheusrule"
)

// Suffixes of the composed names. A Database whose own name ended in one of
// them would compose a name another Database composes (Databases orders and
// orders-r would both own Service orders-r), so names ending in any of them
// are refused, here (reservedSuffix) and at admission by the XRDs' CEL rule
// (TestReservedSuffixes keeps the three lists equal).
const (
	suffixCredentials = "-credentials"
	suffixSuperuser   = "-superuser"
	suffixScripts     = "-scripts"
	suffixRead        = "-r"
	suffixHeadless    = "-hl"
	suffixBackup      = "-backup"
	suffixRestore     = "-restore"
)

// reservedSuffixes are every suffix above. Only -r and -hl collide today
// (Services); the others are of kinds no other Database composes under that
// name, but reserving every one keeps the rule simple and keeps holding when
// a composed kind changes.
var reservedSuffixes = []string{suffixCredentials, suffixSuperuser, suffixScripts, suffixRead, suffixHeadless, suffixBackup, suffixRestore}

// suffixFailover names the Job N-failover. Not a reserved suffix: a Job
// collides with no other Database's composed names (its pods are named by
// the Job controller, with a random suffix), and reserving it would reject
// Databases that exist under such a name.
const suffixFailover = "-failover"

// Recommended Kubernetes labels. The selector uses only name and instance,
// which never change for a Database; component and version may.
const (
	labelName      = "app.kubernetes.io/name"
	labelInstance  = "app.kubernetes.io/instance"
	labelComponent = "app.kubernetes.io/component"
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelPodName   = "statefulset.kubernetes.io/pod-name"

	appName   = "postgresql"
	managedBy = "function-database"

	componentDatabase     = "database"
	componentBackup       = "backup"
	componentRestore      = "restore"
	componentConfig       = "config"
	componentNetwork      = "network"
	componentMetrics      = "metrics"
	componentFailover     = "failover"
	componentArchiveCheck = "archive-check"
	componentDrill        = "drill"
	componentFullBackup   = "full-backup"
)

// Labels others set, which the function reads or selects by.
const (
	// labelNamespaceName is set by the API server on every namespace.
	labelNamespaceName = "kubernetes.io/metadata.name"
	// labelJobControllerUID is set by the Job controller on a Job's pods.
	labelJobControllerUID = "batch.kubernetes.io/controller-uid"

	labelClaimName      = "crossplane.io/claim-name"
	labelClaimNamespace = "crossplane.io/claim-namespace"
)

// Annotations the function writes and reads back.
const (
	annotationSQLNames = "database.example.com/sql-identifiers"

	// annotationMajor records the PostgreSQL major on the StatefulSet, so the
	// running major is read back without parsing image references.
	annotationMajor = "database.example.com/postgres-major"

	// annotationConfigHash on the pod template rolls the pods when what
	// they only pick up at start changes: the scripts the instances run and
	// postmaster-context settings (configHash); reloadable settings are
	// reloaded by the sidecar instead.
	annotationConfigHash = "database.example.com/config-hash"

	// annotationRestoreHash on the restore Job: a hash of the Job as
	// composed, with the run's parameters.
	annotationRestoreHash = "database.example.com/restore-hash"
	// annotationRestoreAttempt on the restore Job: the
	// spec.restoreFrom.attempt it runs.
	annotationRestoreAttempt = "database.example.com/restore-attempt"

	// annotationObjectStorageSource on the copy N-object-storage: the
	// platform's Secret (namespace/name) it was copied from. A copy from
	// the Secret input.objectStorage.secretRef names now, with both keys,
	// behind an archive that works, needs no fresh read (archive.go).
	annotationObjectStorageSource = "database.example.com/object-storage-source"

	annotationFailoverFrom  = "database.example.com/failover-from"
	annotationFailoverCount = "database.example.com/failover-count"
	// annotationFailoverTarget marks a planned switchover's Job and names
	// the ordinal it promotes.
	annotationFailoverTarget = "database.example.com/switchover-to"
	// annotationSwitchoverReason marks a switchover the supervised roll
	// asked for (roll.go): its record says Update, not Switchover.
	annotationSwitchoverReason = "database.example.com/switchover-reason"
)

// Secret keys. The app Secret follows the keys app frameworks expect
// (host, port, dbname, username, password, uri); the admin Secret is
// mounted only by the database pods and the backup and restore jobs.
const (
	keyUsername            = "username"
	keyPassword            = "password"
	keyDBName              = "dbname"
	keyHost                = "host"
	keyPort                = "port"
	keyURI                 = "uri"
	keyJDBCURI             = "jdbc-uri"
	keyPgpass              = "pgpass"
	keyReplicationUsername = "replication-username"
	keyReplicationPassword = "replication-password"
	// keyAppPasswordCopy in the superuser Secret keeps a copy of the app
	// password, read back when the credentials Secret is gone: a regenerated
	// app password would lock out every app that read the old one at start.
	// The opposite copy does not exist: the superuser password in the
	// Secret apps mount would hand them the superuser.
	keyAppPasswordCopy = "app-password"
	// The SCRAM-SHA-256 verifiers of the three roles' passwords, in the
	// superuser Secret: the pods set the roles' passwords with them
	// (ALTER ROLE ... PASSWORD '<verifier>'), so that no plaintext
	// password reaches the server, and no pod computes one (secret.go).
	keySuperuserVerifier   = "password-verifier"
	keyReplicationVerifier = "replication-password-verifier"
	keyAppVerifier         = "app-password-verifier"
)

// Keys of the scripts ConfigMap besides the scripts.
const (
	// keyPostgresqlConf is the tier's settings file in the scripts ConfigMap; the
	// entrypoint includes it after its own replication settings.
	keyPostgresqlConf = "postgresql.conf"
	// keyInitialized in the scripts ConfigMap tells an ordinal-0 pod that
	// finds an empty data directory that the database existed: it must not
	// initdb a new, empty primary.
	keyInitialized = "initialized"
	// keyPrimary and keyInstances in the scripts ConfigMap: the ordinal the
	// function made the primary, and the number of instances (the peers a
	// script asks). Not in the config hash: changing them restarts no pod.
	keyPrimary   = "primary"
	keyInstances = "instances"
	// keySwitchoverOnStop is "true" when the function answers a primary's
	// pod being deleted with a switchover (failover on, standbys): only
	// then does the primary's preStop hook (prestop.sh) wait for one.
	keySwitchoverOnStop = "switchover-on-stop"
	// keyPgbackrestConf is pgBackRest's configuration (archive.go), with
	// the input's objectStorage only. Not in the config hash: pgBackRest
	// reads it at each call.
	keyPgbackrestConf = "pgbackrest.conf"
	// keyRestoreRepo, keyRestoreSource and keyRestoreTarget make the
	// first primary restore from another Database's archive
	// (archiveRestoreKeys).
	keyRestoreRepo   = "restore-repo"
	keyRestoreSource = "restore-source"
	keyRestoreTarget = "restore-target"
)

// Required-resources keys: Crossplane calls again with what each selects.
const (
	// requirementRestoreSource is the required-resources key of the source
	// Database.
	requirementRestoreSource = "restore-source"
	// The instance pods (their readiness), and the pods of the failover Job
	// (its outcome).
	requirementInstances    = "instances"
	requirementFailoverPods = "failover-pods"
	// requirementObjectStorage is the platform's object storage Secret.
	requirementObjectStorage = "object-storage"
	// requirementDrillPods are the restore drill's pods (drill.go).
	requirementDrillPods = "drill-pods"
)

// PostgreSQL roles and port.
const (
	superuser       = "postgres"
	replicationUser = "replicator"
	// monitorUser is the exporter's role (pg_monitor, peer authentication
	// from monitorUID only; metrics.go). With a '-', which no Database's
	// SQL name has (its '-' become '_'): no app role can be this one.
	monitorUser = "postgres-exporter"

	postgresPort = 5432
	portName     = "postgresql"
)

// The environment variables the pods and jobs get are named by the scripts
// package, beside what each script reads of them (scripts.Contract,
// scripts.EnvPodName ...): the failover Job's DURABILITY, LAST_TIMELINE and
// QUALIFIED_ORDINALS, read back from the observed Job, too.

// Container, volume and path names shared by the pods and the scripts (see
// the scripts package for the environment contract).
const (
	containerPostgres     = "postgres"
	containerPasswordSync = "password-sync"
	containerMetrics      = "metrics"
	containerBackup       = "backup"
	containerRestore      = "restore"
	containerFailover     = "failover"
	containerArchiveCheck = "archive-check"
	containerDrill        = "drill"
	containerFullBackup   = "full-backup"

	volData          = "data"
	volBackups       = "backups"
	volScripts       = "scripts"
	volApp           = "app-secret"
	volAdmin         = "superuser-secret"
	volRun           = "run"
	volTmp           = "tmp"
	volShm           = "shm"
	volRestore       = "restore"
	volObjectStorage = "object-storage"
	dataDir          = "/var/lib/postgresql/data"
	pgData           = dataDir + "/pgdata"
	socketDir        = "/var/run/postgresql"
	scriptsDir       = "/opt/database/scripts"
	appDir           = "/etc/database/app"
	adminDir         = "/etc/database/superuser"
	backupsDir       = "/backups"
	restoreDir       = "/restore"
	objectStorageDir = "/etc/database/object-storage"
	tmpDir           = "/tmp"
	shmDir           = "/dev/shm"
)

// The function input's kind, and the defaults of its names.
const (
	inputAPIVersion = "database.fn.example.com/v1beta1"
	inputKind       = "Input"

	defaultImage         = "postgres"
	defaultClusterDomain = "cluster.local"
)

// Kubernetes names, all derived from N so that the pieces can name each
// other without lookups: the StatefulSet's serviceName is N-hl, standbys
// clone from N-0.N-hl, the backup Job mounts the PVC backups-N-0.
func credentialsName(db *database) string     { return db.Name + suffixCredentials }
func superuserName(db *database) string       { return db.Name + suffixSuperuser }
func scriptsName(db *database) string         { return db.Name + suffixScripts }
func readServiceName(db *database) string     { return db.Name + suffixRead }
func headlessServiceName(db *database) string { return db.Name + suffixHeadless }
func backupName(db *database) string          { return db.Name + suffixBackup }
func restoreName(db *database) string         { return db.Name + suffixRestore }
func podName(db *database, ordinal int) string {
	return db.Name + "-" + strconv.Itoa(ordinal)
}

// backupsClaimName is the PVC the StatefulSet controller creates for the
// backups volume claim template of ordinal 0, for database N.
func backupsClaimName(n string) string { return volBackups + "-" + n + "-0" }

// serviceHost is the cluster DNS name of a Service of the Database.
func serviceHost(db *database, service string) string {
	return service + "." + db.Namespace + ".svc." + db.ClusterDomain
}

// peerDomain is the headless Service's domain: instance k is N-k.peerDomain.
func peerDomain(db *database) string {
	return headlessServiceName(db) + "." + db.Namespace + ".svc." + db.ClusterDomain
}

// reservedSQLNames are the Database names whose SQL name (the app role and
// database, '-' turned into '_') PostgreSQL or the Database already has, or
// refuses: the superuser and its database, the replication role, the
// template databases, the pseudo-roles public and none. The bootstrap's
// CREATE ROLE or CREATE DATABASE would fail on them; PostgreSQL refuses a
// role named pg_* outright (reservedSQLPrefix). The XRDs' CEL rules say the
// same at admission.
var reservedSQLNames = []string{superuser, replicationUser, "template0", "template1", "public", "none"}

const reservedSQLPrefix = "pg-"

func reservedSQLName(name string) bool {
	return slices.Contains(reservedSQLNames, name) || strings.HasPrefix(name, reservedSQLPrefix)
}

// reservedSuffix returns the reserved suffix name ends in, or "".
func reservedSuffix(name string) string {
	for _, s := range reservedSuffixes {
		if strings.HasSuffix(name, s) {
			return s
		}
	}
	return ""
}
