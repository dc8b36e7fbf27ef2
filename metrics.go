package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/input/v1beta1"
)

// metricsConfig is the input's metrics resolved (docs/metrics.md).
type metricsConfig struct {
	Image      string
	PodMonitor bool
	Alerts     bool
	Labels     map[string]string
	// AllowedNamespaces may scrape the exporter, sorted, no duplicates.
	AllowedNamespaces []string
}

const (
	// defaultExporterImage is postgres_exporter's own image: the exporter
	// is a static Go binary that reads the server over its socket, so the
	// PostgreSQL image stays whatever the platform runs.
	defaultExporterImage = "prometheuscommunity/postgres-exporter:v0.17.1"
	metricsPort          = 9187
	metricsPortName      = "metrics"
	// The series' label naming the Database (from the pod label
	// app.kubernetes.io/instance): the rules select by namespace and it.
	metricsDatabaseLabel = "database"
)

// resolveMetrics validates the input's metrics; nil when the exporter is off
// (a PodMonitor or rules without it would watch nothing, which is an error).
func resolveMetrics(p *field.Path, in *v1beta1.Metrics) (*metricsConfig, field.ErrorList) {
	var errs field.ErrorList
	m := &metricsConfig{Image: or(in.Image, defaultExporterImage), PodMonitor: in.PodMonitor, Alerts: in.Alerts, Labels: in.Labels}
	if named, err := reference.ParseNormalizedNamed(m.Image); err != nil || len(m.Image) > maxImageLength {
		errs = append(errs, field.Invalid(p.Child("image"), m.Image, "must be an image reference with a tag or a digest, e.g. registry.example.com/postgres-exporter:v0.17.1"))
	} else if reference.IsNameOnly(named) {
		errs = append(errs, field.Invalid(p.Child("image"), m.Image, "must pin a tag or a digest, e.g. "+m.Image+":v0.17.1 (a bare repository runs whatever :latest is)"))
	}
	for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
		v := in.Labels[k]
		if strings.HasPrefix(k, "app.kubernetes.io/") {
			errs = append(errs, field.Invalid(p.Child("labels").Key(k), k, "the app.kubernetes.io/ labels are the function's (they name the Database): use a key of your own, e.g. release"))
			continue
		}
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p.Child("labels").Key(k), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(p.Child("labels").Key(k), v, msg))
		}
	}
	for i, ns := range in.AllowedNamespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(p.Child("allowedNamespaces").Index(i), ns, msg))
		}
	}
	m.AllowedNamespaces = slices.Compact(slices.Sorted(slices.Values(in.AllowedNamespaces)))
	if !in.Enabled {
		if in.PodMonitor || in.Alerts {
			errs = append(errs, field.Invalid(p.Child("enabled"), false, "podMonitor and alerts need the exporter: set metrics.enabled to true"))
		}
		return nil, errs
	}
	return m, errs
}

// metricsContainer runs postgres_exporter beside PostgreSQL. It connects
// over the pod's socket as monitorUser (pg_monitor: statistics and
// settings, no table), as a uid of its own that peer authentication maps to
// that role and no other (entrypoint.sh's pg_ident.conf): no password is
// mounted, no TCP connection to PostgreSQL is opened, and its /probe, which
// takes any DSN, cannot log in as the superuser. It has no probes: an exporter
// that cannot reach the server reports pg_up 0, which the alerts see, and
// a probe of its own would only add a way to make the instance unready (a
// crash-looping exporter still does: docs/metrics.md, limits).
func metricsContainer(db *database) corev1.Container {
	return corev1.Container{
		Name:            containerMetrics,
		Image:           db.Metrics.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Args: []string{
			fmt.Sprintf("--web.listen-address=:%d", metricsPort),
			// The standby's receiver state: is it streaming, from which
			// timeline (docs/metrics.md).
			"--collector.stat_wal_receiver",
		},
		Env: []corev1.EnvVar{{
			Name:  "DATA_SOURCE_NAME",
			Value: fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable application_name=%s", socketDir, postgresPort, monitorUser, containerMetrics),
		}},
		Ports: []corev1.ContainerPort{{Name: metricsPortName, ContainerPort: metricsPort, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		VolumeMounts:    []corev1.VolumeMount{{Name: volRun, MountPath: socketDir}},
		SecurityContext: monitorSecurityContext(),
	}
}

// metricsLabels are the labels of the PodMonitor and the PrometheusRule:
// the Database's, then the platform's selector labels.
func metricsLabels(db *database) map[string]string {
	l := labels(db, componentMetrics)
	maps.Copy(l, db.Metrics.Labels)
	return l
}

// podMonitor has the Prometheus Operator scrape every instance of the
// Database, labelling its series with the Database's name: the rules, the
// dashboards and the person on call select by namespace and database.
func podMonitor(db *database) *monitoringv1.PodMonitor {
	return &monitoringv1.PodMonitor{
		TypeMeta: metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PodMonitor"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      db.Name,
			Namespace: db.Namespace,
			Labels:    metricsLabels(db),
		},
		Spec: monitoringv1.PodMonitorSpec{
			Selector: metav1.LabelSelector{MatchLabels: instanceLabels(db)},
			PodMetricsEndpoints: []monitoringv1.PodMetricsEndpoint{{
				Port:     ptr.To(metricsPortName),
				Interval: "15s",
				RelabelConfigs: []monitoringv1.RelabelConfig{{
					Action:       "replace",
					SourceLabels: []monitoringv1.LabelName{"__meta_kubernetes_pod_label_app_kubernetes_io_instance"},
					TargetLabel:  metricsDatabaseLabel,
				}},
			}},
		},
	}
}

// prometheusRule holds the Database's alerts. One per Database, because
// their bounds follow its spec: the backup schedule sets how old a backup
// may be, durability whether a lost standby blocks writes, the archive
// whether archiving is watched at all.
func prometheusRule(db *database, p *plan) *monitoringv1.PrometheusRule {
	return &monitoringv1.PrometheusRule{
		TypeMeta: metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      db.Name,
			Namespace: db.Namespace,
			Labels:    metricsLabels(db),
		},
		Spec: monitoringv1.PrometheusRuleSpec{Groups: []monitoringv1.RuleGroup{{
			Name:  "database-" + db.Namespace + "-" + db.Name,
			Rules: alertRules(db, p),
		}}},
	}
}

// alert is one rule before it is typed: the expression with the Database's
// selector written as {S}, and the sentence the person on call reads.
type alert struct {
	name, expr, forDur, severity, summary, action string
}

// Bounds of the alerts (docs/metrics.md says why each).
const (
	// slotSafeShare is the share of max_slot_wal_keep_size (an eighth of
	// the data volume, at most 2GB: walSettings, or the tier's own) below
	// which a slot's WAL left is a standby about to need cloning again;
	// half leaves the on-call time to act. Read from the instance's own
	// setting, since it follows the volume and a tier may change it.
	slotSafeShare = 0.5
	// connectionsBound is the share of the connections clients may open
	// (max_connections less those reserved for superusers) past which a
	// burst is refused.
	connectionsBound = 0.9
	// diskFreeBound is the share of the data volume left free past which
	// PostgreSQL is close to PANIC on a full disk.
	diskFreeBound = 0.1
	// promotionSeconds is what a failover takes after the grace and the
	// fence: the Job's start, the choice, pg_promote (docs/failover.md
	// measures 30-60 s in all).
	promotionSeconds = 60
)

// primaryMissingFor is how long a Database may have no primary before it
// pages: longer than an automatic failover takes (the grace the input
// sets, the fence, the promotion), so that a failover that works pages no
// one, and never less than 2 minutes.
func primaryMissingFor(db *database) time.Duration {
	return max(2*time.Minute, time.Duration(int64(db.FailoverGrace)+desiredFence()+promotionSeconds)*time.Second)
}

// promDuration says a duration as Prometheus reads it: 2m, 2m31s.
func promDuration(d time.Duration) string {
	m, sec := int64(d/time.Minute), int64(d%time.Minute/time.Second)
	if sec == 0 {
		return fmt.Sprintf("%dm", m)
	}
	return fmt.Sprintf("%dm%ds", m, sec)
}

func alertRules(db *database, p *plan) []monitoringv1.Rule {
	sel := fmt.Sprintf("namespace=%q,%s=%q", db.Namespace, metricsDatabaseLabel, db.Name)
	instance := fmt.Sprintf("%s/%s", db.Namespace, db.Name)
	// A standby streams when its own WAL receiver says so: a walsender on
	// the primary also serves a clone's pg_basebackup, which acknowledges
	// no commit.
	const streaming = `pg_stat_wal_receiver_received_tli{S,status="streaming"}`
	alerts := []alert{{
		name: "DatabaseNotScraped",
		// No series at all: every pod gone or Pending, or the PodMonitor
		// not selected. Every other alert needs some series.
		expr:     "absent(up{S})",
		forDur:   "5m",
		severity: "critical",
		summary:  "no instance of Database " + instance + " is scraped",
		action:   "kubectl get pods -l app.kubernetes.io/instance=" + db.Name + "; if they run, check that the Prometheus selects the PodMonitor (metrics.labels)",
	}, {
		name: "DatabasePrimaryMissing",
		// Instances are scraped, none answers as a primary: writes fail.
		expr:     "count(up{S}) unless count(count by (pod) (pg_replication_is_replica{S} == 0))",
		forDur:   promDuration(primaryMissingFor(db)),
		severity: "critical",
		summary:  "Database " + instance + " has no primary: writes fail",
		action:   "kubectl describe database; the Failover condition says why no standby was promoted (docs/failover.md)",
	}, {
		name: "DatabaseTwoPrimaries",
		// The fence (docs/failover.md) makes this impossible; if it
		// fires, a write may be acknowledged on a deposed primary.
		expr:     "count(count by (pod) (pg_replication_is_replica{S} == 0)) > 1",
		forDur:   "1m",
		severity: "critical",
		summary:  "Database " + instance + " has two instances answering as primary",
		action:   "stop the instance that is not status.primary (delete its pod); then read docs/failover.md",
	}, {
		name:     "DatabaseInstanceDown",
		expr:     "up{S} == 0 or pg_up{S} == 0",
		forDur:   "5m",
		severity: "warning",
		summary:  "instance {{ $labels.pod }} of Database " + instance + " does not answer",
		action:   "kubectl logs {{ $labels.pod }} -c postgres (a standby cloning does not answer until it has its copy); the Database's Ready and Failover conditions",
	}}
	if p.Replicas > 1 {
		alerts = append(alerts, alert{
			name: "DatabaseStandbyNotStreaming",
			// Standbys up, fewer of them streaming: they fall behind and
			// would lose what they have not received.
			expr:     "count(pg_replication_is_replica{S} == 1) > (count(" + streaming + ") or vector(0))",
			forDur:   "5m",
			severity: "warning",
			summary:  "a standby of Database " + instance + " is not streaming from the primary",
			action:   "kubectl logs <standby pod> -c postgres: a standby that cannot follow the primary's timeline says so (docs/failover.md, rejoin)",
		}, alert{
			name: "DatabaseSlotNearlyLost",
			// A slot's WAL left before max_slot_wal_keep_size invalidates
			// it, on the primary: it falls whether its standby lags or is
			// disconnected.
			expr: fmt.Sprintf("min by (slot_name) ((pg_replication_slot_safe_wal_size_bytes{S} < on (pod) group_left () (%g * pg_settings_max_slot_wal_keep_size_bytes{S}))"+
				" and on (pod) pg_replication_is_replica{S} == 0)", slotSafeShare),
			forDur:   "5m",
			severity: "warning",
			summary:  "replication slot {{ $labels.slot_name }} of Database " + instance + " has {{ $value | humanize1024 }}B of WAL left before it is invalidated",
			action:   "its standby lags or is gone: once invalidated the standby must be cloned again; a slot of an instance scaled away can be dropped (pg_drop_replication_slot)",
		})
		if db.Durability == durabilitySync {
			alerts = append(alerts, alert{
				name: "DatabaseWritesBlocked",
				// durability sync: a commit waits for a standby's
				// acknowledgement, so with none streaming every write hangs.
				expr:     "count(count by (pod) (pg_replication_is_replica{S} == 0)) unless count(" + streaming + ")",
				forDur:   "1m",
				severity: "critical",
				summary:  "Database " + instance + " (durability sync) has no standby streaming: every commit waits",
				action:   "bring a standby back (DatabaseStandbyNotStreaming, DatabaseInstanceDown); durability async trades this for possible loss",
			})
		}
	}
	alerts = append(alerts, alert{
		name:     "DatabaseConnectionsNearLimit",
		expr:     fmt.Sprintf("sum by (pod) (pg_stat_activity_count{S}) > on (pod) %g * max by (pod) (pg_settings_max_connections{S} - on (pod, namespace, database) pg_settings_superuser_reserved_connections{S})", connectionsBound),
		forDur:   "5m",
		severity: "warning",
		summary:  "instance {{ $labels.pod }} of Database " + instance + " uses over 90% of the connections clients may open",
		action:   "find the client holding sessions (pg_stat_activity), or a larger spec.size",
	}, alert{
		name: "DatabaseDiskFilling",
		// The kubelet's volume stats: PostgreSQL stops on a full disk.
		expr: fmt.Sprintf("kubelet_volume_stats_available_bytes{namespace=%q,persistentvolumeclaim=~%q} < %g * kubelet_volume_stats_capacity_bytes{namespace=%q,persistentvolumeclaim=~%q}",
			db.Namespace, volData+"-"+db.Name+"-[0-9]+", diskFreeBound, db.Namespace, volData+"-"+db.Name+"-[0-9]+"),
		forDur:   "5m",
		severity: "warning",
		summary:  "volume {{ $labels.persistentvolumeclaim }} of Database " + instance + " is over 90% full",
		action:   "free space (VACUUM FULL, drop what is not needed) or grow the volume by hand: spec.storage does not resize it (docs/limits.md, volumes do not grow)",
	})
	if db.ObjectStorage != nil {
		alerts = append(alerts, alert{
			name:     "DatabaseArchiveFailing",
			expr:     "increase(pg_stat_archiver_failed_count{S}[5m]) > 0 and on (pod) pg_replication_is_replica{S} == 0",
			forDur:   "10m",
			severity: "critical",
			summary:  "Database " + instance + " cannot archive its WAL: the recovery point falls behind and WAL piles up on the primary's disk",
			action:   "the WALArchive condition and the postgres log say why (bucket, credentials); docs/backups.md",
		})
	}
	if db.Backup.Enabled {
		if gap, ok := scheduleGap(db.Backup.Schedule); ok {
			bound := gap + backupSlack
			last := fmt.Sprintf("kube_cronjob_status_last_successful_time{namespace=%q,cronjob=%q}", db.Namespace, backupName(db))
			created := fmt.Sprintf("kube_cronjob_created{namespace=%q,cronjob=%q}", db.Namespace, backupName(db))
			alerts = append(alerts, alert{
				name: "DatabaseBackupTooOld",
				// kube-state-metrics' CronJob series: the backup runs in a
				// Job, not in PostgreSQL. A CronJob that never succeeded
				// has no last success: its age counts from its creation.
				expr:     fmt.Sprintf("time() - %s > %d or (time() - %s > %d unless on (namespace, cronjob) %s)", last, int64(bound.Seconds()), created, int64(bound.Seconds()), last),
				forDur:   "10m",
				severity: "warning",
				summary:  fmt.Sprintf("no backup of Database %s has succeeded for over %s (schedule %s)", instance, hoursMinutes(bound), db.Backup.Schedule),
				action:   "kubectl get jobs -l app.kubernetes.io/component=backup; the BackupHealthy condition says why",
			})
		}
	}
	rules := make([]monitoringv1.Rule, 0, len(alerts))
	for _, a := range alerts {
		rules = append(rules, monitoringv1.Rule{
			Alert:  a.name,
			Expr:   intstr.FromString(strings.ReplaceAll(a.expr, "{S", "{"+sel)),
			For:    ptr.To(monitoringv1.Duration(a.forDur)),
			Labels: map[string]string{"severity": a.severity, "namespace": db.Namespace, metricsDatabaseLabel: db.Name},
			Annotations: map[string]string{
				"summary":     a.summary,
				"description": "What to do: " + a.action + ".",
			},
		})
	}
	return rules
}

// backupSlack is how late a backup may end after its schedule fires: a
// missed start may run an hour late (the backup CronJob's
// startingDeadlineSeconds) and a run may take until its deadline.
const backupSlack = time.Hour + backupDeadline

// scheduleGaps caches scheduleGap by schedule: the same few schedules come
// on every reconcile. Bounded, as the schedules are the users'.
var scheduleGaps = struct {
	sync.Mutex
	m map[string]time.Duration
}{m: map[string]time.Duration{}}

const maxScheduleGaps = 1024

// scheduleGap is the longest time between two runs of a cron schedule, over
// eight days from a fixed instant (the function reads no clock): a week's
// pattern at any frequency, weekends included. A backup older than that,
// plus the time a backup may take, was missed.
func scheduleGap(schedule string) (time.Duration, bool) {
	scheduleGaps.Lock()
	gap, ok := scheduleGaps.m[schedule]
	scheduleGaps.Unlock()
	if ok {
		return gap, true
	}
	s, err := cronParser.Parse(schedule)
	if err != nil {
		return 0, false
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(8 * 24 * time.Hour)
	t := s.Next(start)
	if t.IsZero() {
		return 0, false
	}
	// At least two gaps: a schedule rarer than the window (@yearly) still
	// has its own.
	for i := 0; i < 2 || t.Before(end); i++ {
		n := s.Next(t)
		if n.IsZero() {
			return 0, false
		}
		gap = max(gap, n.Sub(t))
		t = n
	}
	scheduleGaps.Lock()
	if len(scheduleGaps.m) < maxScheduleGaps {
		scheduleGaps.m[schedule] = gap
	}
	scheduleGaps.Unlock()
	return gap, true
}

// hoursMinutes says a bound as the on-call reads it: 25h, 1h30m.
func hoursMinutes(d time.Duration) string {
	h, m := int64(d/time.Hour), int64(d%time.Hour/time.Minute)
	if m == 0 {
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh%dm", h, m)
}
