// Package v1beta1 contains the input type for function-database: the platform
// team's knobs (size tiers, image, storage, network policy) set in the
// Composition step.
// +kubebuilder:object:generate=true
// +groupName=database.fn.example.com
// +versionName=v1beta1
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Input configures how function-database composes a Database. Every field is
// optional: without input the built-in tiers (small, medium, large), the
// official postgres image and a namespace-scoped NetworkPolicy are used.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:categories=crossplane
type Input struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Tiers overrides the built-in size tiers. Keys are the tier names a
	// Database's spec.size accepts (small, medium, large); a field left empty
	// keeps the built-in value of that tier.
	// +optional
	Tiers map[string]Tier `json:"tiers,omitempty"`

	// Image is the PostgreSQL image repository, e.g. a mirror's. The tag
	// is the Database's spec.version, so an image is never floating, unless
	// Images names the image for that version.
	// +kubebuilder:default="postgres"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+([._/:-][a-z0-9]+)*$`
	// +optional
	Image string `json:"image,omitempty"`

	// Images names the exact image for a PostgreSQL version, so that a
	// platform can use its mirror and pin digests. Keys are a major ("15")
	// or a major.minor ("15.8"); values are whole image references with a
	// tag, a digest or both, e.g. "registry.example.com/pg:15.8@sha256:...".
	// A Database's spec.version picks the entry with the same key; a
	// Database asking for a major.minor without an entry of its own gets
	// its major's entry only when that entry's tag is exactly the
	// major.minor (a user's explicit minor is never swapped for another),
	// otherwise Image with the tag spec.version. Every container of the
	// Database (instances, password sync, backup, restore) runs it.
	// +optional
	Images map[string]string `json:"images,omitempty"`

	// StorageClassName is the storage class of the data and backup volumes
	// when a Database does not name one. Empty means the cluster default.
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`

	// ClusterDomain is the cluster's DNS domain, used in endpoints and in the
	// connection Secret's host.
	// +kubebuilder:default="cluster.local"
	// +optional
	ClusterDomain string `json:"clusterDomain,omitempty"`

	// NetworkPolicy controls the NetworkPolicy composed beside each Database.
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`

	// Failover controls the automatic failover of Databases with standbys.
	// +optional
	Failover *Failover `json:"failover,omitempty"`

	// Spread controls where a Database's instances run relative to each
	// other.
	// +optional
	Spread *Spread `json:"spread,omitempty"`

	// ObjectStorage is the S3-compatible bucket every Database archives its
	// WAL to (docs/backups.md). Unset, nothing is archived.
	// +optional
	ObjectStorage *ObjectStorage `json:"objectStorage,omitempty"`

	// Updates controls when instances take a new pod template (a function
	// upgrade that changes a script they run, a minor version, a size
	// change).
	// +optional
	Updates *Updates `json:"updates,omitempty"`

	// Metrics adds a PostgreSQL metrics endpoint to every instance and,
	// optionally, the Prometheus Operator objects that scrape it and alert
	// on it (docs/metrics.md).
	// +optional
	Metrics *Metrics `json:"metrics,omitempty"`
}

// Metrics is what the person on call sees of a Database on a graph and in
// an alert (docs/metrics.md).
type Metrics struct {
	// Enabled adds a postgres_exporter container to every instance pod,
	// serving Prometheus metrics on port 9187 (named metrics). It reads the
	// server over the pod's local socket, so it needs no password. Turning
	// it on or off changes the pod template: instances roll as for any
	// update (updates.policy).
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Image is the exporter's whole image reference, with a tag or a
	// digest (default prometheuscommunity/postgres-exporter:v0.17.1).
	// +optional
	Image string `json:"image,omitempty"`

	// PodMonitor composes a Prometheus Operator PodMonitor per Database
	// (monitoring.coreos.com/v1; the CRD must be installed), labelling its
	// series with namespace, pod and database.
	// +optional
	PodMonitor bool `json:"podMonitor,omitempty"`

	// Alerts composes a PrometheusRule per Database with its alerts:
	// primary missing, two primaries, instance down, standby not
	// streaming, writes blocked, replication lag, connections near the
	// limit, disk filling, WAL archive failing and backup too old, with
	// bounds that follow the Database's spec (docs/metrics.md).
	// +optional
	Alerts bool `json:"alerts,omitempty"`

	// AllowedNamespaces are the namespaces whose pods may scrape the
	// exporter, where Prometheus runs (e.g. monitoring); the Database's own
	// namespace always may. The NetworkPolicy admits no one else to the
	// metrics port: the exporter answers any DSN on /probe with what the
	// superuser sees of it (statistics and names, not rows).
	// +optional
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`

	// Labels are added to the PodMonitor and the PrometheusRule, for the
	// Prometheus's ruleSelector and podMonitorSelector (e.g.
	// release: prometheus).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// Updates is when instances take a new pod template (docs/failover.md,
// "Updates: the supervised roll").
type Updates struct {
	// Policy is Supervised (the default): a new template rolls at once, one
	// instance at a time, standbys first, the primary only after a
	// switchover to an updated standby. Deferred: nothing is restarted for
	// it; each instance takes it when its pod is next created for another
	// reason (a drain, an eviction, a node lost, a pod deleted), and
	// condition Updated says which still run the old one. A platform sets
	// Deferred outside its maintenance windows and Supervised within them.
	// +kubebuilder:validation:Enum=Supervised;Deferred
	// +optional
	Policy string `json:"policy,omitempty"`
}

// ObjectStorage is an S3-compatible bucket, and how Databases use it.
// Archiving needs pgBackRest in the PostgreSQL image (docs/backups.md).
type ObjectStorage struct {
	// Endpoint is the server's host and optional port, e.g.
	// "s3.eu-west-1.amazonaws.com" or "minio.storage.svc:9000". Always
	// HTTPS: the server's certificate is checked against the system's CAs,
	// or the secret's ca.crt when it has one.
	// +kubebuilder:validation:MinLength=1
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket's name; it must exist.
	// +kubebuilder:validation:MinLength=3
	Bucket string `json:"bucket"`

	// PathPrefix is the folder in the bucket under which each Database
	// keeps its WAL and backups, at <pathPrefix>/<namespace>/<name>.
	// +kubebuilder:default="function-database"
	// +optional
	PathPrefix string `json:"pathPrefix,omitempty"`

	// Region is the bucket's region (S3 signs requests with it).
	// +kubebuilder:default="us-east-1"
	// +optional
	Region string `json:"region,omitempty"`

	// URIStyle is how the bucket is addressed: Host (bucket.endpoint, as
	// AWS wants) or Path (endpoint/bucket, as most self-hosted servers do).
	// +kubebuilder:validation:Enum=Host;Path
	// +kubebuilder:default=Host
	// +optional
	URIStyle string `json:"uriStyle,omitempty"`

	// SecretRef names the Secret with the bucket's credentials, in keys
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and optionally the
	// server's CA bundle in ca.crt. The function copies those keys into
	// a Secret beside each Database (<name>-object-storage), so that a
	// platform keeps one Secret in its own namespace.
	SecretRef SecretReference `json:"secretRef"`

	// ArchiveTimeoutSeconds forces a WAL segment switch when this many
	// seconds passed since the last one with writes in between: the most
	// acknowledged writes a restore from the archive can miss.
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	// +optional
	ArchiveTimeoutSeconds *int32 `json:"archiveTimeoutSeconds,omitempty"`

	// CheckMinutes is how often the archive is checked (the CronJob N-wal):
	// a failing archive is the WALArchive condition within this many
	// minutes.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=30
	// +optional
	CheckMinutes *int32 `json:"checkMinutes,omitempty"`

	// RetentionDays is how far back a restore reaches: pgBackRest keeps
	// the full backups (and the WAL after the oldest of them) that a
	// point-in-time restore to any moment of the last this many days
	// needs, and expires the rest from the bucket after each backup.
	// 7 when neither this nor RetentionFullBackups is set.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3650
	// +optional
	RetentionDays *int32 `json:"retentionDays,omitempty"`

	// RetentionFullBackups keeps this many full backups instead (and the
	// WAL after the oldest of them), whatever their age: for a platform
	// that budgets the bucket by count. Not with RetentionDays.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	RetentionFullBackups *int32 `json:"retentionFullBackups,omitempty"`

	// Drill is the restore drill: on a schedule, each Database's newest
	// backup is restored from the bucket into a throwaway copy, replayed
	// to the archive's end, checked and discarded; the Database's
	// BackupVerified condition says how it went. On unless disabled.
	// +optional
	Drill *Drill `json:"drill,omitempty"`

	// CrossNamespaceRestores are the namespaces whose archives a Database
	// may restore from (spec.restoreFrom.namespace) in another namespace.
	// None by default: a Database restores only its own namespace's
	// archives, since a restore copies every row of the source.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	CrossNamespaceRestores []CrossNamespaceRestore `json:"crossNamespaceRestores,omitempty"`
}

// CrossNamespaceRestore lets Databases in namespace To restore the archives
// of Databases in namespace From.
type CrossNamespaceRestore struct {
	// From is the source's namespace, or "*" for any.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	From string `json:"from"`
	// To is the restoring Database's namespace, or "*" for any.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	To string `json:"to"`
}

// Drill is when the restore drill runs.
type Drill struct {
	// Enabled turns the drill on (the default) or off.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Schedule is a 5-field cron schedule in the cluster's time zone. A
	// drill needs room for a whole copy of the Database on the node it
	// runs on, for as long as it runs.
	// +kubebuilder:default="30 4 * * 0"
	// +optional
	Schedule string `json:"schedule,omitempty"`
}

// SecretReference names a Secret in a namespace.
type SecretReference struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace is the Secret's namespace.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
}

// Spread is how a Database's instances are placed on nodes and zones.
type Spread struct {
	// Nodes is how strictly instances keep to a node each. Required: no two
	// instances of a Database on one node, so that losing a node loses one
	// instance at most; an instance no node can take stays Pending, and the
	// Database's Scheduled condition says which and why. Preferred: a node
	// each when the scheduler can, shared otherwise (a cluster with fewer
	// nodes than instances, such as one node for development), where a
	// node's loss can take a primary and its standby together. Unset: Required
	// for a new Database; one that exists keeps what it runs with (a
	// Database created by an earlier version, whose instances may share a
	// node and a node's local volume, is not made unschedulable by an
	// upgrade). Across zones (topology.kubernetes.io/zone) instances are
	// always spread as evenly as the scheduler can, never required.
	// +kubebuilder:validation:Enum=Required;Preferred
	// +optional
	Nodes string `json:"nodes,omitempty"`
}

// Failover is how a lost primary is replaced (docs/failover.md).
type Failover struct {
	// Enabled promotes the most advanced standby when the primary's pod is
	// not ready for GraceSeconds. Off, a lost primary waits for a person.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// GraceSeconds is how long the failover Job waits for a primary whose
	// pod turned unready to answer again before promoting a standby: the
	// bound between a restart (a roll, a deleted pod) and a loss. It adds to
	// the readiness probe's detection (about 10 s).
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	GraceSeconds *int32 `json:"graceSeconds,omitempty"`
}

// NetworkPolicy limits who can reach a Database's PostgreSQL port.
type NetworkPolicy struct {
	// Enabled composes a NetworkPolicy that admits connections to port 5432
	// only from the Database's own namespace and AllowedNamespaces.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// AllowedNamespaces are other namespaces whose pods may connect.
	// +listType=set
	// +optional
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`
}

// Tier is what a size (small, medium, large) means: instance count, compute
// and PostgreSQL settings.
type Tier struct {
	// Replicas is the number of PostgreSQL instances: one primary and
	// Replicas-1 streaming hot standbys.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// CPU is the CPU request and limit of each instance, e.g. "500m".
	// +optional
	CPU string `json:"cpu,omitempty"`

	// Memory is the memory request and limit of each instance, e.g. "1Gi".
	// Requests equal limits so that PostgreSQL runs in the Guaranteed QoS
	// class and is the last to be evicted.
	// +optional
	Memory string `json:"memory,omitempty"`

	// Storage is the default data volume size of each instance.
	// +optional
	Storage string `json:"storage,omitempty"`

	// BackupStorage is the default backup volume size.
	// +optional
	BackupStorage string `json:"backupStorage,omitempty"`

	// Settings are postgresql.conf parameters for this tier, e.g.
	// max_connections or shared_buffers. They are merged over the built-in
	// settings of the tier.
	// +optional
	Settings map[string]string `json:"settings,omitempty"`
}
