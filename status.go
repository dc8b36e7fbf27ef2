package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// Phases of a Database (status.phase).
const (
	phaseProvisioning = "Provisioning"
	phaseRunning      = "Running"
	phaseDegraded     = "Degraded"
	phaseFailed       = "Failed"
)

// Condition types the function sets on the XR and its claim. Crossplane owns
// Ready and Synced; these say why.
const (
	condBackupHealthy = "BackupHealthy"
	condSpecApplied   = "SpecApplied"
	condRestored      = "Restored"
	condWritable      = "Writable"
	condScheduled     = "Scheduled"
	condInstances     = "Instances"
	condWALArchive    = "WALArchive"
	// condBackupVerified is the restore drill's verdict (drill.go).
	condBackupVerified = "BackupVerified"
)

// dbStatus is the status the function writes to the XR (docs/api.md),
// all of it derived from observed state, so it never changes without a cause.
type dbStatus struct {
	// Ready is the original Database CRD's status.ready: true when every
	// composed resource is ready and the phase is Running.
	Ready            bool           `json:"ready"`
	Endpoint         string         `json:"endpoint,omitempty"`
	ReadEndpoint     string         `json:"readEndpoint,omitempty"`
	Port             int32          `json:"port,omitempty"`
	Version          string         `json:"version,omitempty"`
	Replicas         int32          `json:"replicas"`
	ReadyReplicas    int32          `json:"readyReplicas"`
	Phase            string         `json:"phase"`
	ConnectionSecret string         `json:"connectionSecret,omitempty"`
	Backup           *backupStatus  `json:"backup,omitempty"`
	FullBackup       *backupStatus  `json:"fullBackup,omitempty"`
	Restore          *restoreStatus `json:"restore,omitempty"`
	// Primary is the primary's pod; Failover the record of failovers,
	// read back by the function (failover.go).
	Primary  string          `json:"primary,omitempty"`
	Failover *failoverRecord `json:"failover,omitempty"`
	// Drill is the last restore drill's verdict, read back (drill.go).
	Drill *drillRecord `json:"drill,omitempty"`
	// Update is the roll of a new pod template, read back (roll.go).
	Update *rollRecord `json:"update,omitempty"`
}

type backupStatus struct {
	LastScheduleTime   *metav1.Time `json:"lastScheduleTime,omitempty"`
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
}

// condition is one condition for the XR and its claim. Messages are stable:
// they change only when the observed state they describe changes.
type condition struct {
	Type    string
	Status  fnv1.Status
	Reason  string
	Message string
}

// status derives the XR's status; allReady tells whether every composed
// resource is ready, as the function reports it to Crossplane.
func status(db *database, p *plan, o *observed, stsReady, allReady bool) dbStatus {
	s := dbStatus{Phase: phase(p, stsReady)}
	s.Ready = allReady && s.Phase == phaseRunning
	if o.exists[rnService] {
		s.Endpoint = serviceHost(db, db.Name)
		s.Port = postgresPort
		// A single instance serves reads on the primary.
		s.ReadEndpoint = s.Endpoint
	}
	if o.exists[rnServiceRead] {
		s.ReadEndpoint = serviceHost(db, readServiceName(db))
	}
	if o.exists[rnCredentials] {
		s.ConnectionSecret = credentialsName(db)
	}
	if sts := o.StatefulSet; sts != nil {
		if major, img, ok := runningMajor(sts); ok {
			// The version the running image's tag names; the major for an
			// image pinned by digest alone.
			if s.Version, _ = imageVersion(img); s.Version == "" {
				s.Version = strconv.Itoa(major)
			}
		}
		if sts.Spec.Replicas != nil {
			s.Replicas = *sts.Spec.Replicas
		}
		s.ReadyReplicas = sts.Status.ReadyReplicas
	}
	s.Backup, s.FullBackup = backupStatusOf(o.Backup), backupStatusOf(o.FullBackup)
	if p.Restore != nil {
		s.Restore = p.Restore.Status
	}
	if o.StatefulSet != nil {
		s.Primary = podName(db, p.Primary)
	}
	if p.Drill != nil {
		s.Drill = p.Drill.Record
	}
	if p.Roll != nil {
		s.Update = p.Roll.Record
	}
	if f := p.Failover; f != nil && (f.Record.Count > 0 || f.Record.Last != nil) {
		s.Failover = f.Record
	}
	return s
}

// backupStatusOf is a backup CronJob's last schedule and success, nil
// before either.
func backupStatusOf(cj *batchv1.CronJob) *backupStatus {
	if cj == nil || (cj.Status.LastScheduleTime == nil && cj.Status.LastSuccessfulTime == nil) {
		return nil
	}
	return &backupStatus{LastScheduleTime: cj.Status.LastScheduleTime, LastSuccessfulTime: cj.Status.LastSuccessfulTime}
}

// phase sums up the Database. A restore that has not completed keeps it
// Provisioning, even on a ready StatefulSet: its data is not there yet, and
// Degraded would page someone about instances that are fine (the Restored
// condition says how the restore goes).
func phase(p *plan, stsReady bool) string {
	switch {
	case p.Restore != nil && p.Restore.Failed:
		return phaseFailed
	case p.Restore != nil && p.Restore.Pending:
		return phaseProvisioning
	case stsReady:
		return phaseRunning
	case p.Initialized:
		return phaseDegraded
	}
	return phaseProvisioning
}

func conditions(db *database, p *plan, o *observed) []condition {
	out := []condition{backupCondition(db, o, p.Archive), specApplied(db, p), versionCondition(p)}
	if p.Restore != nil {
		out = append(out, p.Restore.Condition)
	}
	if p.Failover != nil {
		out = append(out, p.Failover.Condition)
	}
	if c, ok := writableCondition(db, p, o); ok {
		out = append(out, c)
	}
	if c, ok := scheduledCondition(db, p, o); ok {
		out = append(out, c)
	}
	if c, ok := instancesCondition(db, p, o); ok {
		out = append(out, c)
	}
	if p.Roll != nil && p.Roll.Condition.Type != "" {
		out = append(out, p.Roll.Condition)
	}
	if p.Archive != nil {
		out = append(out, p.Archive.Condition)
	}
	if p.Drill != nil {
		out = append(out, p.Drill.Condition)
	}
	return out
}

// scheduledCondition says whether every instance found a node, and names
// those the scheduler placed nowhere with its reason and the way out: with
// spread Required (the default), fewer nodes than instances leaves some
// Pending, which must not look like a slow start. Only for several
// instances, and only when their pods were read or the StatefulSet counts
// them all ready.
func scheduledCondition(db *database, p *plan, o *observed) (condition, bool) {
	if p.Replicas < 2 || !o.Instances.Resolved {
		return condition{}, false
	}
	var pending []string
	for k := range int(p.Replicas) {
		if msg, ok := o.Instances.Unschedulable[podName(db, k)]; ok {
			pending = append(pending, fmt.Sprintf("%s (%s)", podName(db, k), strings.TrimSpace(msg)))
		}
	}
	if len(pending) > 0 {
		msg := fmt.Sprintf("no node takes %s", strings.Join(pending, "; "))
		if p.SpreadRequired {
			msg += fmt.Sprintf(". Spread is Required: each of the %d instances needs a node of its own (a node's loss then takes one instance at most). Add nodes, or set spread.nodes: Preferred in the function input to let instances share one", p.Replicas)
		}
		return condition{condScheduled, fnv1.Status_STATUS_CONDITION_FALSE, "InstanceUnschedulable", msg}, true
	}
	if p.SpreadRequired {
		return condition{condScheduled, fnv1.Status_STATUS_CONDITION_TRUE, "OneNodeEach", "every instance is on a node of its own (spread Required)"}, true
	}
	return condition{condScheduled, fnv1.Status_STATUS_CONDITION_TRUE, "MayShareNodes", "every instance has a node; spread is Preferred, so instances may share one, and a node's loss can take a primary and its standby together"}, true
}

// instancesCondition names each instance that is not ready, the node it is
// on, whether it is the primary, and why (its Ready condition's words, its
// deletion, a crash loop, no node): a lost node or a crash-looping standby
// is read in the Database's status, not searched for among its pods. Only
// for several instances, and only when their pods were read or the
// StatefulSet counts them all ready (a healthy Database reads no pod).
func instancesCondition(db *database, p *plan, o *observed) (condition, bool) {
	in := o.Instances
	if p.Replicas < 2 || !in.Resolved {
		return condition{}, false
	}
	var lost []string
	for k := range int(p.Replicas) {
		pod := podName(db, k)
		if in.Ready[pod] {
			continue
		}
		what := pod
		if k == p.Primary {
			what += " (the primary)"
		}
		if n := in.Node[pod]; n != "" {
			what += " on node " + n
		}
		why := or(in.NotReady[pod], "not ready")
		switch {
		case in.CrashLooping[pod]:
			why = "postgres is in CrashLoopBackOff (its log says why)"
		case in.Unschedulable[pod] != "":
			why = "on no node (condition " + condScheduled + ")"
		}
		lost = append(lost, what+": "+why)
	}
	if len(lost) == 0 {
		return condition{condInstances, fnv1.Status_STATUS_CONDITION_TRUE, "AllReady", fmt.Sprintf("all %d instances are ready", p.Replicas)}, true
	}
	return condition{condInstances, fnv1.Status_STATUS_CONDITION_FALSE, "InstancesNotReady", fmt.Sprintf(
		"%d of %d instances ready; not ready: %s", int(p.Replicas)-len(lost), p.Replicas, strings.Join(lost, "; "))}, true
}

// writableCondition: with durability sync a commit returns only once a
// standby flushed it, so with no standby streaming every commit waits, for
// as long as that lasts (a roll of a two-instance Database restarts its only
// standby), while the primary stays ready: this condition says so. A ready
// standby streamed within the readiness bound (probe.sh). Only when the
// instances' pods were read (required resources) and the primary is ready;
// a lost primary is the Failover condition's.
func writableCondition(db *database, p *plan, o *observed) (condition, bool) {
	if db.Durability != durabilitySync || p.Replicas < 2 || !o.Instances.Resolved || !o.Instances.Ready[podName(db, p.Primary)] {
		return condition{}, false
	}
	var ready, notReady []string
	for k := range int(p.Replicas) {
		if k == p.Primary {
			continue
		}
		if name := podName(db, k); o.Instances.Ready[name] {
			ready = append(ready, name)
		} else {
			notReady = append(notReady, name)
		}
	}
	if len(ready) == 0 {
		return condition{condWritable, fnv1.Status_STATUS_CONDITION_FALSE, "NoSynchronousStandby", fmt.Sprintf(
			"durability sync: every commit waits until a standby has flushed it, and no standby is streaming (%s not ready): writes block, reads work. They resume when a standby streams again; durability async would not wait (and could lose the last commits in a failover)",
			strings.Join(notReady, ", "))}, true
	}
	return condition{condWritable, fnv1.Status_STATUS_CONDITION_TRUE, "SynchronousStandby", fmt.Sprintf(
		"durability sync: a commit returns once one of the streaming standbys (%s) has flushed it", strings.Join(ready, ", "))}, true
}

// specApplied says whether every field of the spec is applied, and names
// the deprecated spellings the spec uses with the fields to move to: a
// condition, not a Warning, so that the advice stays visible without an
// event on every reconcile, and goes once the spec is moved.
func specApplied(db *database, p *plan) condition {
	c := condition{condSpecApplied, fnv1.Status_STATUS_CONDITION_TRUE, "Applied", "every field of spec is applied"}
	if len(p.Blocked) > 0 {
		msgs := make([]string, 0, len(p.Blocked))
		for _, b := range p.Blocked {
			msgs = append(msgs, b.Message)
		}
		c = condition{condSpecApplied, fnv1.Status_STATUS_CONDITION_FALSE, p.Blocked[0].Reason, strings.Join(msgs, "; ")}
	}
	if len(db.Deprecated) > 0 {
		if len(p.Blocked) == 0 {
			c.Reason = "AppliedDeprecatedFields"
		}
		olds, moves := make([]string, 0, len(db.Deprecated)), make([]string, 0, len(db.Deprecated))
		for _, d := range db.Deprecated {
			olds = append(olds, d.Old)
			moves = append(moves, d.New+": "+d.Value)
		}
		c.Message += fmt.Sprintf("; %s %s deprecated (the original Database CRD's spelling): move to %s",
			strings.Join(olds, " and "), map[bool]string{true: "is", false: "are"}[len(olds) == 1], strings.Join(moves, ", "))
	}
	return c
}

// backupCondition judges backups by their CronJobs' own status, never by the
// wall clock (which would make the response change on every call): healthy
// when each one's last successful run is not older than its last scheduled
// one. With the platform's archive there are two: the volume dumps and the
// full backups to the bucket (N-full); the condition is the worse of them
// (False, then Unknown), its message says both. The WAL archive itself has
// its own condition, WALArchive, and a failing archive makes BackupHealthy
// False too (backups on or off): the one condition to alert on says that
// what a restore needs is not being kept.
func backupCondition(db *database, o *observed, a *archivePlan) condition {
	c := backupsCondition(db, o)
	if a != nil && a.Condition.Status == fnv1.Status_STATUS_CONDITION_FALSE {
		c = condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_FALSE, a.Condition.Reason,
			"the WAL archive fails (WALArchive): " + a.Condition.Message + "; " + c.Message}
	}
	return c
}

// backupsCondition is BackupHealthy from the backup CronJobs alone.
func backupsCondition(db *database, o *observed) condition {
	if !db.Backup.Enabled {
		// Not applicable, so True: alerts fire on BackupHealthy=False (or
		// not True), and a Database whose backups are off on purpose is
		// not failing. The reason and message say there are no backups.
		msg := "no backups are taken (spec.backup.enabled is false): nothing can fail; enable them to have backups"
		if db.ObjectStorage != nil {
			msg += " (the WAL archive goes on, from its first full backup; the repository's retention acts only after a backup)"
		}
		return condition{condBackupHealthy, fnv1.Status_STATUS_CONDITION_TRUE, "BackupDisabled", msg}
	}
	dump := backupHealth(db, "backup", backupName(db), o.Backup)
	if db.ObjectStorage == nil {
		return dump
	}
	full := backupHealth(db, "full backup", fullBackupName(db), o.FullBackup)
	c := dump
	if rank(full.Status) > rank(dump.Status) {
		c = full
	}
	c.Message = "volume dump (CronJob " + backupName(db) + "): " + dump.Message + "; full backup to the bucket (CronJob " + fullBackupName(db) + "): " + full.Message
	return c
}

// rank orders condition statuses by how bad they are.
func rank(s fnv1.Status) int {
	switch s {
	case fnv1.Status_STATUS_CONDITION_FALSE:
		return 2
	case fnv1.Status_STATUS_CONDITION_UNKNOWN:
		return 1
	}
	return 0
}

// backupHealth judges one backup CronJob, name, whose runs are what's.
func backupHealth(db *database, what, name string, cj *batchv1.CronJob) condition {
	const typ = condBackupHealthy
	if cj == nil || cj.Status.LastScheduleTime == nil {
		return condition{typ, fnv1.Status_STATUS_CONDITION_UNKNOWN, "NoBackupYet", "no " + what + " has been scheduled yet; schedule " + db.Backup.Schedule}
	}
	sched, succ := cj.Status.LastScheduleTime, cj.Status.LastSuccessfulTime
	switch {
	case succ != nil && !succ.Before(sched):
		return condition{typ, fnv1.Status_STATUS_CONDITION_TRUE, "BackupSucceeded", "last " + what + " succeeded at " + stamp(succ)}
	case len(cj.Status.Active) > 0:
		// Bounded: the run is stopped at backupDeadline, its Job fails, the
		// active list empties and the cases below report it. The function
		// has no clock to tell a long run from a hung one; the deadline does.
		return condition{typ, fnv1.Status_STATUS_CONDITION_UNKNOWN, "BackupRunning", "a " + what + " scheduled at " + stamp(sched) + " is running; a run not done within " + backupDeadlineText + " is stopped and reported failed"}
	}
	// The CronJob's status does not say why its Job failed; the Job does.
	why := "it failed or ran past its " + backupDeadlineText + " bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded)"
	if succ == nil {
		return condition{typ, fnv1.Status_STATUS_CONDITION_FALSE, "BackupFailed", "the " + what + " scheduled at " + stamp(sched) + " did not succeed and no " + what + " ever has: " + why + "; see the jobs of CronJob " + name}
	}
	return condition{typ, fnv1.Status_STATUS_CONDITION_FALSE, "BackupFailed", "the " + what + " scheduled at " + stamp(sched) + " did not succeed: " + why + "; last success at " + stamp(succ) + "; see the jobs of CronJob " + name}
}

func stamp(t *metav1.Time) string { return t.UTC().Format(time.RFC3339) }
