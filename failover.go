package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// Failover (docs/failover.md). The function stays a pure function of what
// it observes: it never reads a clock. What must survive a reconcile is
// written where it is read back: the primary's ordinal in the scripts
// ConfigMap (key primary: the pods read it too), the count and the last
// failover in status.failover. "The primary has been gone for G seconds" is
// measured by the failover Job, which the function composes when the
// primary's pod is not ready and whose outcome (its pod's termination
// message) it reads through Crossplane's required resources, as it reads the
// instance pods' readiness.
//
// Per reconcile:
//   - no Job: the primary's pod (N-<primary>) is not ready and failover
//     applies (standbys, initialised, no restore pending, enabled in the
//     input) → compose Job N-failover {from: primary, count}. The
//     primary's pod being deleted while it is still ready (a drain: its
//     preStop hook holds it) → the same Job as a switchover to a ready
//     standby, reason PrimaryStopping.
//   - the Job runs → keep it as it was created (frozen), condition
//     Failover=True InProgress.
//   - the Job ended and its count is not recorded yet → record it
//     (status.failover.count = count+1) and, if it promoted ordinal T, make
//     T the primary now: ConfigMap key primary, the rw Service's selector,
//     status.primary. The Job stays composed until the record is read back,
//     so a lost status write only repeats the recording. A promotion on a
//     timeline not above the last recorded failover's is refused (a former
//     primary answering, not this failover's promotion): recorded as a run,
//     the primary unmoved, a Warning.
//   - the Job ended and is recorded → drop it: while the primary is still
//     not ready, the next reconcile composes a new Job.
const (
	condFailover = "Failover"

	reasonPrimaryLost     = "PrimaryLost"
	reasonSwitchover      = "Switchover"
	reasonSwitchoverWaits = "SwitchoverPending"
	// reasonPrimaryStopping: a switchover from a primary whose pod was
	// being deleted (a drain), status.failover.last.reason.
	reasonPrimaryStopping = "PrimaryStopping"
	reasonFailoverRunning = "InProgress"
	reasonFailoverIdle    = "PrimaryReady"
	reasonFailoverFailed  = "Failed"
	reasonFailoverOff     = "Disabled"
	reasonSingleInstance  = "SingleInstance"
	reasonScaleInBlocked  = "ScaleInBelowPrimaryRefused"
	// reasonScaleInWaits: a smaller size while a failover Job runs across
	// more instances; the scale-in waits for the Job's outcome.
	reasonScaleInWaits   = "ScaleInDuringFailover"
	reasonOldTimeline    = "OldTimelineRefused"
	reasonPrimaryInvalid = "PrimaryOrdinalInvalid"
	reasonFailoverHeld   = "Held"
	// reasonPrimaryFound: a Job started for an instance that was never the
	// primary (the ConfigMap's key edited) found the primary on the last
	// recorded timeline; nothing was promoted.
	reasonPrimaryFound     = "PrimaryFound"
	failoverResultPromoted = "promoted"
	failoverResultFound    = "found"
	failoverResultNotNeed  = "not-needed"
	// failoverResultHeld: the Job found no standby it may promote without
	// losing acknowledged writes (durability sync and a standby silent,
	// or no standby qualified); it exits non-zero and runs again.
	failoverResultHeld = "held"

	// failoverStartingMax is how long the Job lets a primary that is
	// starting up (rejecting connections: crash recovery) take before it
	// counts as lost; failoverDeadline bounds the whole run.
	failoverStartingMax = 120
	failoverDeadline    = 10 * time.Minute
)

// failoverRecord is status.failover: the function's memory of failovers.
type failoverRecord struct {
	// Count is the number of failover Jobs whose outcome was recorded.
	Count int64          `json:"count"`
	Last  *failoverEvent `json:"last,omitempty"`
}

// failoverEvent is one promotion.
type failoverEvent struct {
	From     string       `json:"from"`
	To       string       `json:"to"`
	Reason   string       `json:"reason"`
	Time     *metav1.Time `json:"time,omitempty"`
	Timeline int64        `json:"timeline,omitempty"`
	LSN      string       `json:"lsn,omitempty"`
}

// instancePods is what the required resources said of the instance pods.
// Resolved is false before Crossplane answered (the first call of a
// reconcile): then no new failover starts.
type instancePods struct {
	Resolved bool
	Ready    map[string]bool
	// FromStatus: Ready was read from the StatefulSet's status, which
	// counts every instance ready (settledInstances), not from the pods.
	FromStatus bool
	// Fence is, by pod name, how long after its postgres stops answering
	// the kubelet has killed it (fenceSeconds of its own liveness probe).
	Fence map[string]int64
	// Unschedulable is, by pod name, why the scheduler placed it on no
	// node (its PodScheduled condition's message).
	Unschedulable map[string]string
	// Revision is, by pod name, the StatefulSet revision of the template
	// the pod was created from; CrashLooping the pods whose kubelet holds
	// a container back (CrashLoopBackOff): the supervised roll, roll.go.
	Revision     map[string]string
	CrashLooping map[string]bool
	// Node is, by pod name, the node the pod was placed on; NotReady why
	// a pod is not ready, in the words of its Ready condition or its
	// deletion (the Instances condition).
	Node     map[string]string
	NotReady map[string]string
	// Stopping are the pods being deleted whose postgres still answers its
	// readiness probe (their Ready condition True): a drain's eviction or
	// a delete, not a lost node (whose pods the node controller marks not
	// ready). A primary among them is switched over from (its preStop hook
	// holds it until then, prestop.sh).
	Stopping map[string]bool
}

// failoverOutcome is the failover Job's termination message, as its pod
// reports it.
type failoverOutcome struct {
	Resolved bool
	scripts.FailoverOutcome
}

// failoverPlan is what the function does about failover this reconcile.
type failoverPlan struct {
	// Primary is the ordinal the rw Service selects and the ConfigMap names.
	Primary int
	Job     *batchv1.Job
	Record  *failoverRecord
	// Condition is the Failover condition; Require the required resources.
	Condition condition
	Require   map[string]*fnv1.ResourceSelector
	// InProgress: a failover Job runs (the Database is not Ready).
	InProgress bool
	// Warnings are Warning results; the Failover condition's message says
	// each too (newlyWarned).
	Warnings []warning
	// UpdateSwitchoverFailed: a switchover the roll asked for ended
	// without promoting, recorded now (roll.go counts it).
	UpdateSwitchoverFailed bool
}

// observedPrimary is the ordinal the function last made the primary: the
// observed ConfigMap's key, else the record in status (a ConfigMap deleted by
// hand), else 0 (a Database composed before failover existed, or new).
//
// A value read back that names no instance is ignored, as if absent, and
// warned about: it must never be named primary nor size the StatefulSet (a
// key primary of 7 on a medium Database once scaled it to 8 instances, as
// the scale-in guard of makePlan keeps every ordinal up to the primary's).
// The instances are the most of the observed StatefulSet's replicas and the
// tier's: a primary above the tier's count after a failover is kept (scaling
// in below it is refused), one above both is no instance.
func observedPrimary(db *database, o *observed) (int, *warning) {
	instances := int(db.Tier.Replicas)
	if sts := o.StatefulSet; sts != nil && sts.Spec.Replicas != nil {
		instances = max(instances, int(*sts.Spec.Replicas))
	}
	var ignored []string
	if o.Scripts != nil {
		if v, ok := o.Scripts.Data[keyPrimary]; ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < instances {
				return n, nil
			}
			ignored = append(ignored, fmt.Sprintf("key %s of ConfigMap %s is %q", keyPrimary, scriptsName(db), v))
		}
	}
	if r := o.FailoverRecord; r != nil && r.Last != nil && r.Last.To != "" {
		if n, ok := ordinalOf(db, r.Last.To); ok && n < instances {
			return n, invalidPrimary(db, ignored, instances, n, "status.failover.last.to")
		}
		ignored = append(ignored, fmt.Sprintf("status.failover.last.to is %q", r.Last.To))
	}
	return 0, invalidPrimary(db, ignored, instances, 0, "nothing valid recorded: ordinal 0, as for a new Database")
}

// invalidPrimary is the warning about the primary's ordinals ignored, or nil.
func invalidPrimary(db *database, ignored []string, instances, primary int, from string) *warning {
	if len(ignored) == 0 {
		return nil
	}
	return &warning{reasonPrimaryInvalid, fmt.Sprintf(
		"%s: no instance of the %d (%s to %s); ignored, the primary is taken to be %s (%s) and the key rewritten. "+
			"The function owns key %s: do not edit it. If %s does not answer as a primary (SELECT pg_is_in_recovery() is true there), "+
			"the failover Job composed while it is not ready (failover on) finds the instance that does, on a newer timeline, and records it",
		strings.Join(ignored, "; "), instances, podName(db, 0), podName(db, instances-1), podName(db, primary), from,
		keyPrimary, podName(db, primary))}
}

// maxInstances bounds spec.primary (the tiers allow up to 9 instances).
const maxInstances = 9

// ordinalOf is the ordinal of pod N-k of the Database, exactly as podName
// spells it.
func ordinalOf(db *database, pod string) (int, bool) {
	k, ok := strings.CutPrefix(pod, db.Name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(k)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == k
}

// lastTimeline is the timeline the primary writes on as far as the record
// knows: the last recorded failover's, 1 (initdb's) when none is recorded.
// A failover Job gets it (LAST_TIMELINE), and its outcome must be above it.
func lastTimeline(r *failoverRecord) int64 {
	if r != nil && r.Last != nil && r.Last.Timeline > 0 {
		return r.Last.Timeline
	}
	return 1
}

// planFailover decides failover for this reconcile (see the comment at the
// top of this file), for the p.Replicas instances composed.
func planFailover(db *database, p *plan, o *observed) *failoverPlan {
	replicas := p.Replicas
	fp := &failoverPlan{Primary: p.Primary, Record: &failoverRecord{}}
	if o.FailoverRecord != nil {
		r := *o.FailoverRecord
		fp.Record = &r
	}
	job, out := o.Failover, o.FailoverOutcome
	if job != nil {
		fp.Require = map[string]*fnv1.ResourceSelector{requirementFailoverPods: podSelector(db, map[string]string{labelJobControllerUID: string(job.UID)})}
	}
	// The pods are asked for only when they can change the decision: not
	// before the StatefulSet exists (no pod can), nor while its status
	// counts every instance ready (nothing to fail over; a switchover needs
	// no more), so that a healthy Database, or a new one, costs Crossplane
	// one call per reconcile, not two. With failover off they still tell
	// whether every instance found a node (the Scheduled condition).
	if replicas > 1 && o.StatefulSet != nil && !o.Instances.FromStatus {
		if fp.Require == nil {
			fp.Require = map[string]*fnv1.ResourceSelector{}
		}
		fp.Require[requirementInstances] = podSelector(db, instanceLabels(db))
	}

	if job != nil {
		count, from := jobCounter(job)
		target := jobTarget(job)
		frozen := frozenFailoverJob(db, job, p.Image, replicas)
		// Recorded once status.failover.count, read back, counts this
		// Job; its outcome is its pod's termination message.
		stage := stageOf(job, failoverRecorded(fp.Record, job), out.Resolved)
		switch stage {
		case stageRecorded:
			// Read back: the Job has done its work; dropping it lets the
			// next failover start with a new one.
			delete(fp.Require, requirementFailoverPods)
			fp.Condition = failoverIdle(db, fp)
			return fp
		case stageReading:
			fp.Job, fp.InProgress = frozen, true
			fp.Condition = condition{condFailover, fnv1.Status_STATUS_CONDITION_TRUE, reasonFailoverRunning, fmt.Sprintf(
				"failover Job %s completed; reading its outcome", frozen.Name)}
			return fp
		case stageSucceeded:
			fp.Job = frozen
			fp.Record.Count = count + 1
			promoted := out.Result == failoverResultPromoted && out.From == from && out.To >= 0 && out.To < int(replicas) && out.To != from
			if out.Result == failoverResultFound && out.From == from && out.To >= 0 && out.To < int(replicas) && out.To != from {
				if known := knownTimeline(fp.Record, job); out.Timeline != known {
					// Found only ever names the primary on the last
					// recorded timeline: anything else is no such primary.
					fp.Condition = oldTimeline(db, frozen.Name, from, out, known)
					fp.Warnings = append(fp.Warnings, warning{reasonOldTimeline, fp.Condition.Message})
					return fp
				}
				fp.Primary = out.To
				fp.Record.Last = &failoverEvent{
					From: podName(db, from), To: podName(db, out.To), Reason: reasonPrimaryFound,
					Time: job.Status.CompletionTime, Timeline: out.Timeline, LSN: out.LSN,
				}
				msg := fmt.Sprintf("failover Job %s found %s answering as a standby and %s as the primary on timeline %d, the last recorded one: %s was named the primary wrongly (key %s of ConfigMap %s edited?); the primary is %s again, nothing was promoted. The function owns key %s: do not edit it",
					frozen.Name, podName(db, from), podName(db, out.To), out.Timeline, podName(db, from), keyPrimary, scriptsName(db), podName(db, out.To), keyPrimary)
				fp.Warnings = append(fp.Warnings, warning{reasonPrimaryFound, msg})
				fp.Condition = failoverIdle(db, fp)
				return fp
			}
			if known := knownTimeline(fp.Record, job); promoted && out.Timeline <= known {
				// Recorded as a run (the Job is dropped once read back, and
				// a new one starts while the primary is not ready), but
				// the primary is not moved.
				fp.Condition = oldTimeline(db, frozen.Name, from, out, known)
				fp.Warnings = append(fp.Warnings, warning{reasonOldTimeline, fp.Condition.Message})
				return fp
			}
			if promoted {
				fp.Primary = out.To
				reason := reasonPrimaryLost
				if target >= 0 {
					reason = switchoverReason(job)
				}
				fp.Record.Last = &failoverEvent{
					From: podName(db, from), To: podName(db, out.To), Reason: reason,
					Time: job.Status.CompletionTime, Timeline: out.Timeline, LSN: out.LSN,
				}
			}
			fp.Condition = failoverIdle(db, fp)
			if out.Result != failoverResultPromoted {
				fp.Condition.Message = fmt.Sprintf("failover Job %s ended without promoting (%s); %s", frozen.Name, or(out.Reason, or(out.Result, "no outcome reported")), fp.Condition.Message)
				fp.UpdateSwitchoverFailed = switchoverReason(job) == reasonUpdate
			}
			return fp
		case stageFailed:
			fp.Job = frozen
			fp.Record.Count = count + 1
			fp.UpdateSwitchoverFailed = switchoverReason(job) == reasonUpdate
			fp.Condition = condition{condFailover, fnv1.Status_STATUS_CONDITION_FALSE, reasonFailoverFailed, fmt.Sprintf(
				"failover Job %s failed (%s): no standby answered, or the promotion did not complete; its log says which. A new Job starts while primary %s is not ready",
				frozen.Name, or(jobFailure(job).Reason, "no reason given"), podName(db, from))}
			if out.Result == failoverResultHeld {
				fp.Condition = failoverHeld(db, frozen.Name, from, out.Reason)
			}
			return fp
		default:
			fp.Job, fp.InProgress = frozen, true
			fp.Condition = failoverRunning(db, from)
			if target >= 0 {
				fp.Condition = switchoverRunning(db, from, target, switchoverReason(job))
			}
			if out.Result == failoverResultHeld {
				fp.Condition = failoverHeld(db, frozen.Name, from, out.Reason)
			}
			return fp
		}
	}

	switch {
	case replicas <= 1:
		fp.Condition = condition{condFailover, fnv1.Status_STATUS_CONDITION_FALSE, reasonSingleInstance,
			"one instance: there is no standby to fail over to; a lost primary waits for its pod to return"}
		return fp
	case !db.Failover:
		fp.Condition = condition{condFailover, fnv1.Status_STATUS_CONDITION_FALSE, reasonFailoverOff,
			"automatic failover is off in the function input (failover.enabled); a lost primary waits for a person"}
		return fp
	}
	fp.Condition = failoverIdle(db, fp)
	primaryPod := podName(db, fp.Primary)
	if !o.Instances.Resolved || !p.Initialized || o.StatefulSet == nil ||
		(p.Restore != nil && p.Restore.Pending) || p.Roll.restartsPrimary(fp.Primary) {
		return fp
	}
	if o.Instances.Stopping[primaryPod] {
		// The primary's pod is being deleted while its postgres serves (a
		// drain): its preStop hook holds it until a switchover moves the
		// primary, which loses nothing and takes seconds; a failover would
		// wait out the grace and the fence once it stopped.
		if target, ok := stoppingTarget(db, o, fp.Primary, int(replicas)); ok {
			fp.Job, fp.InProgress = failoverJob(db, fp.Primary, fp.Record.Count, p.Image, replicas, target, reasonPrimaryStopping, failoverFacts(db, o, fp.Primary, replicas)), true
			fp.Condition = switchoverRunning(db, fp.Primary, target, reasonPrimaryStopping)
			return fp
		}
	}
	if !o.Instances.Ready[primaryPod] {
		fp.Job, fp.InProgress = failoverJob(db, fp.Primary, fp.Record.Count, p.Image, replicas, -1, reasonPrimaryLost, failoverFacts(db, o, fp.Primary, replicas)), true
		fp.Condition = failoverRunning(db, fp.Primary)
		return fp
	}
	// A planned switchover, asked for by spec.primary or by the supervised
	// roll (roll.go), once every instance is ready: the target must be a
	// streaming standby to catch up with the primary.
	target, reason, preferred := -1, reasonSwitchover, -1
	if t := db.Primary; t != nil && *t != fp.Primary {
		preferred = *t
		switch {
		case *t >= int(replicas):
			fp.Condition.Reason = reasonSwitchoverWaits
			fp.Condition.Message = fmt.Sprintf("spec.primary %d is not an instance (size %s has %d); the primary stays %s", *t, db.Size, replicas, primaryPod)
			return fp
		case p.Roll.holds(*t):
			// Switched to now, it would be switched away from before its
			// own restart: it waits for the roll.
			fp.Condition.Reason = reasonSwitchoverWaits
			fp.Condition.Message = fmt.Sprintf("spec.primary asks for %s; the switchover waits until it runs the new pod template (condition %s)", podName(db, *t), condUpdated)
		default:
			target = *t
		}
	}
	if target < 0 {
		if t, ok := p.Roll.switchoverTarget(fp.Primary, int(replicas), preferred); ok {
			target, reason = t, reasonUpdate
		}
	}
	if target < 0 {
		return fp
	}
	for k := range int(replicas) {
		if !o.Instances.Ready[podName(db, k)] {
			fp.Condition.Reason = reasonSwitchoverWaits
			fp.Condition.Message = fmt.Sprintf("%s asks for %s; the switchover starts once every instance is ready (%s is not)", switchoverCause(reason), podName(db, target), podName(db, k))
			return fp
		}
	}
	fp.Job, fp.InProgress = failoverJob(db, fp.Primary, fp.Record.Count, p.Image, replicas, target, reason, failoverFacts(db, o, fp.Primary, replicas)), true
	fp.Condition = switchoverRunning(db, fp.Primary, target, reason)
	return fp
}

// switchoverCause says who asked for a switchover.
func switchoverCause(reason string) string {
	switch reason {
	case reasonUpdate:
		return "the roll of a new pod template (condition " + condUpdated + ")"
	case reasonPrimaryStopping:
		return "the primary's pod is being deleted: a drain, an eviction or a delete"
	}
	return "spec.primary"
}

// stoppingTarget is the standby a switchover from a stopping primary goes
// to: a ready one (streaming, not being deleted itself), on another node
// than the primary's where one is (a drain empties that node), the lowest
// ordinal first so that the choice is deterministic. false when none is
// ready: the failover path then waits for the primary to come back.
func stoppingTarget(db *database, o *observed, primary, replicas int) (int, bool) {
	node := o.Instances.Node[podName(db, primary)]
	target := -1
	for k := range replicas {
		pod := podName(db, k)
		if k == primary || !o.Instances.Ready[pod] {
			continue
		}
		if node == "" || o.Instances.Node[pod] != node {
			return k, true
		}
		if target < 0 {
			target = k
		}
	}
	return target, target >= 0
}

// oldTimeline refuses a promotion the Job reported on a timeline not above
// known: the instance that answers is a former primary (or a server started
// anew), and making it the primary would lose what was written since.
func oldTimeline(db *database, job string, from int, out failoverOutcome, known int64) condition {
	return condition{condFailover, fnv1.Status_STATUS_CONDITION_FALSE, reasonOldTimeline, fmt.Sprintf(
		"failover Job %s reported %s promoted on timeline %d, not above timeline %d of the last recorded failover (status.failover.last.timeline, the Job's LAST_TIMELINE): refused, the primary stays %s. "+
			"An instance answering as a primary on an old timeline is a former primary and lacks what was written since; "+
			"the Job is dropped and a new one promotes a standby while %s is not ready. %s stops by its probe and rejoins as a standby once a primary on a newer timeline answers; "+
			"if no standby can be promoted, bring %s back",
		job, podName(db, out.To), out.Timeline, known, podName(db, from), podName(db, from), podName(db, out.To), podName(db, from))}
}

// knownTimeline is the timeline a promotion must be above: the last
// recorded failover's, or what the Job was given when that is higher (a
// status lost while the Job ran).
func knownTimeline(r *failoverRecord, job *batchv1.Job) int64 {
	known := lastTimeline(r)
	if v, ok := frozenEnv(job, scripts.EnvLastTimeline); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > known {
			known = n
		}
	}
	return known
}

// failoverHeld: the Job's last run held rather than promote a standby that
// could lack acknowledged writes (safety before liveness); it says why.
func failoverHeld(db *database, job string, from int, why string) condition {
	return condition{condFailover, fnv1.Status_STATUS_CONDITION_FALSE, reasonFailoverHeld, fmt.Sprintf(
		"primary %s is lost and failover Job %s holds instead of promoting: %s. Writes stay unavailable until the primary or that standby returns",
		podName(db, from), job, or(why, "no reason given"))}
}

func switchoverRunning(db *database, from, to int, reason string) condition {
	return condition{condFailover, fnv1.Status_STATUS_CONDITION_TRUE, reasonFailoverRunning, fmt.Sprintf(
		"switching over from %s to %s (%s): Job %s makes the primary read-only, waits for %s to replay everything, then promotes it",
		podName(db, from), podName(db, to), switchoverCause(reason), db.Name+suffixFailover, podName(db, to))}
}

func failoverRunning(db *database, from int) condition {
	return condition{condFailover, fnv1.Status_STATUS_CONDITION_TRUE, reasonFailoverRunning, fmt.Sprintf(
		"primary %s is not ready: Job %s waits %ds for it to answer, then promotes the most advanced standby",
		podName(db, from), db.Name+suffixFailover, db.FailoverGrace)}
}

func failoverIdle(db *database, fp *failoverPlan) condition {
	msg := fmt.Sprintf("primary %s; failover is armed (grace %ds)", podName(db, fp.Primary), db.FailoverGrace)
	if l := fp.Record.Last; l != nil {
		when := ""
		if l.Time != nil {
			when = " at " + stamp(l.Time)
		}
		msg += fmt.Sprintf("; last failover from %s to %s%s (%s, timeline %d)", l.From, l.To, when, l.Reason, l.Timeline)
	}
	return condition{condFailover, fnv1.Status_STATUS_CONDITION_FALSE, reasonFailoverIdle, msg}
}

// switchoverReason is the record's reason for a switchover Job: Update when
// the roll asked for it, PrimaryStopping when the primary's pod was being
// deleted, Switchover (spec.primary) otherwise.
func switchoverReason(j *batchv1.Job) string {
	if r := j.Annotations[annotationSwitchoverReason]; r == reasonUpdate || r == reasonPrimaryStopping {
		return r
	}
	return reasonSwitchover
}

// jobCounter reads the count and the lost primary a failover Job was
// created for.
func jobCounter(j *batchv1.Job) (count int64, from int) {
	count, _ = strconv.ParseInt(j.Annotations[annotationFailoverCount], 10, 64)
	from, _ = strconv.Atoi(j.Annotations[annotationFailoverFrom])
	return max(count, 0), max(from, 0)
}

// failoverFacts are what a new failover Job is told of the state it was
// composed in (names.go): the durability, the timeline of the last recorded
// failover (1 when none is), and the standbys fit to promote: those whose
// pods were ready (the standby's readiness requires it to stream, recently
// and not far behind), ascending, without the lost primary from.
func failoverFacts(db *database, o *observed, from int, replicas int32) []corev1.EnvVar {
	var qualified []string
	for k := range int(replicas) {
		if k != from && o.Instances.Ready[podName(db, k)] {
			qualified = append(qualified, strconv.Itoa(k))
		}
	}
	// The lost primary's own probe decides when it has been killed (pods
	// of an older template may have a slower one); without its pod, or
	// its probe, the one composed now.
	fence, ok := o.Instances.Fence[podName(db, from)]
	if !ok {
		fence = desiredFence()
	}
	return []corev1.EnvVar{
		{Name: scripts.EnvFenceSeconds, Value: strconv.FormatInt(fence, 10)},
		{Name: scripts.EnvDurability, Value: db.Durability},
		{Name: scripts.EnvLastTimeline, Value: strconv.FormatInt(lastTimeline(o.FailoverRecord), 10)},
		{Name: scripts.EnvQualifiedOrdinals, Value: strings.Join(qualified, " ")},
	}
}

// jobTarget is the ordinal a switchover Job was created to promote, -1 for
// a failover Job.
func jobTarget(j *batchv1.Job) int {
	if t, err := strconv.Atoi(j.Annotations[annotationFailoverTarget]); err == nil {
		return t
	}
	return -1
}

// failoverRecorded: status.failover.count, read back, counts the failover
// Job j's outcome (the Job is dropped).
func failoverRecorded(r *failoverRecord, j *batchv1.Job) bool {
	count, _ := jobCounter(j)
	return r != nil && r.Count > count
}

// frozenFailoverJob is the observed failover Job j composed again as it was
// created: its count, lost primary and target from its annotations, its
// image and its whole environment (the facts, the instances, the grace, the
// mode) from its container, whatever the size, the input, the state or the
// function version say now. Its pod template is immutable: a Job composed
// from the values of now would fail every apply until it ended (a size
// changed mid-failover once changed INSTANCES).
func frozenFailoverJob(db *database, j *batchv1.Job, image string, replicas int32) *batchv1.Job {
	count, from := jobCounter(j)
	f := failoverJob(db, from, count, frozenImage(j, containerFailover, image), replicas, jobTarget(j), switchoverReason(j), nil)
	if env := frozenContainerEnv(j, containerFailover); env != nil {
		f.Spec.Template.Spec.Containers[0].Env = env
	}
	return f
}

// failoverHoldsScaleIn keeps the instances a running failover Job was
// composed across (its INSTANCES, frozen) when the size asks for fewer than
// replicas: the Job may promote one of the ordinals a scale-in would delete,
// and the writes acknowledged there would go with its pod and volume. Once
// the Job's outcome is recorded (the primary moved, or not) the scale-in
// proceeds, under the rule that keeps the primary.
func failoverHoldsScaleIn(db *database, o *observed, replicas int32) (int32, *blocked) {
	j := o.Failover
	if j == nil {
		return replicas, nil
	}
	if failoverRecorded(o.FailoverRecord, j) {
		return replicas, nil
	}
	v, _ := frozenEnv(j, scripts.EnvInstances)
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n <= int64(replicas) || n > maxInstances {
		return replicas, nil
	}
	return int32(n), &blocked{reasonScaleInWaits, fmt.Sprintf(
		"size %s has %d instance(s), but failover Job %s runs across %d and may promote %s: scaling in waits for its outcome, then applies (keeping the primary's ordinal)",
		db.Size, replicas, j.Name, n, podName(db, int(n)-1))}
}

// failoverJob runs failover.sh once against the instances: a failover of
// the lost primary from, or with target >= 0 a planned switchover to target.
// reason is why a switchover runs, kept in an annotation unless it is
// Switchover (read back by switchoverReason, so the frozen Job keeps it).
// facts are failoverFacts (nil when the Job is composed frozen: its whole
// environment is then read back, frozenFailoverJob).
func failoverJob(db *database, from int, count int64, image string, replicas int32, target int, reason string, facts []corev1.EnvVar) *batchv1.Job {
	env := []corev1.EnvVar{
		{Name: scripts.EnvDatabase, Value: db.Name},
		{Name: scripts.EnvPrimaryOrdinal, Value: strconv.Itoa(from)},
		{Name: scripts.EnvInstances, Value: strconv.Itoa(int(replicas))},
		{Name: scripts.EnvPeerDomain, Value: peerDomain(db)},
		{Name: scripts.EnvPGPort, Value: strconv.Itoa(postgresPort)},
		{Name: scripts.EnvAdminSecretDir, Value: adminDir},
		{Name: scripts.EnvGraceSeconds, Value: strconv.Itoa(int(db.FailoverGrace))},
		{Name: scripts.EnvStartingMaxSeconds, Value: strconv.Itoa(failoverStartingMax)},
	}
	env = append(env, facts...)
	ann := map[string]string{
		annotationFailoverFrom:  strconv.Itoa(from),
		annotationFailoverCount: strconv.FormatInt(count, 10),
	}
	if target >= 0 {
		env = append(env, corev1.EnvVar{Name: scripts.EnvMode, Value: scripts.ModeSwitchover}, corev1.EnvVar{Name: scripts.EnvTargetOrdinal, Value: strconv.Itoa(target)})
		ann[annotationFailoverTarget] = strconv.Itoa(target)
	}
	if target >= 0 && reason != reasonSwitchover {
		ann[annotationSwitchoverReason] = reason
	}
	c := scriptContainer(containerFailover, image, scripts.Failover, env, jobResources(), []corev1.VolumeMount{
		{Name: volScripts, MountPath: scriptsDir, ReadOnly: true},
		{Name: volAdmin, MountPath: adminDir, ReadOnly: true},
		{Name: volTmp, MountPath: tmpDir},
	})
	// The outcome (failover.sh's report: promoted, found, held) is read
	// from the termination message file.
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	return oneShotJob(db, oneShot{
		name:        db.Name + suffixFailover,
		component:   componentFailover,
		annotations: ann,
		retries:     3,
		deadline:    failoverDeadline,
		container:   c,
		volumes: []corev1.Volume{
			scriptsVolume(db),
			secretVolume(volAdmin, superuserName(db)),
			{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
}

// podSelector asks Crossplane for the pods of the Database's namespace with
// these labels.
func podSelector(db *database, l map[string]string) *fnv1.ResourceSelector {
	return &fnv1.ResourceSelector{
		ApiVersion: "v1", Kind: "Pod", Namespace: ptr.To(db.Namespace),
		Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: l}},
	}
}

// lookupInstances reads the instance pods' readiness from the request. A
// pod being deleted is not ready, whatever its last condition said.
func lookupInstances(req *fnv1.RunFunctionRequest) instancePods {
	rs, ok := req.GetRequiredResources()[requirementInstances]
	if !ok {
		return instancePods{}
	}
	out := instancePods{Resolved: true, Ready: map[string]bool{}, Fence: map[string]int64{}, Unschedulable: map[string]string{}, Revision: map[string]string{}, CrashLooping: map[string]bool{},
		Node: map[string]string{}, NotReady: map[string]string{}, Stopping: map[string]bool{}}
	for _, r := range rs.GetItems() {
		pod := r.GetResource()
		name := stringAt(pod, "metadata", "name")
		if name == "" {
			continue
		}
		if n := stringAt(pod, "spec", "nodeName"); n != "" {
			out.Node[name] = n
		}
		if stringAt(pod, "metadata", "deletionTimestamp") != "" {
			// A pod on a node that stopped answering stays so until the
			// node returns or is declared gone (docs/failover.md).
			out.NotReady[name] = "being deleted (Terminating)"
			out.Stopping[name] = podConditionTrue(pod, corev1.PodReady)
			continue
		}
		if f, ok := podFence(pod); ok {
			out.Fence[name] = f
		}
		if rev := stringAt(pod, "metadata", "labels", labelRevision); rev != "" {
			out.Revision[name] = rev
		}
		for _, c := range structAt(pod, "status").GetFields()["containerStatuses"].GetListValue().GetValues() {
			if stringAt(c.GetStructValue(), "state", "waiting", "reason") == "CrashLoopBackOff" {
				out.CrashLooping[name] = true
			}
		}
		for _, c := range structAt(pod, "status").GetFields()["conditions"].GetListValue().GetValues() {
			cs := c.GetStructValue()
			switch stringAt(cs, "type") {
			case string(corev1.PodReady):
				out.Ready[name] = stringAt(cs, "status") == string(corev1.ConditionTrue)
				if !out.Ready[name] {
					out.NotReady[name] = strings.TrimSpace(or(stringAt(cs, "message"), stringAt(cs, "reason")))
				}
			case string(corev1.PodScheduled):
				if stringAt(cs, "status") == string(corev1.ConditionFalse) && stringAt(cs, "reason") == corev1.PodReasonUnschedulable {
					out.Unschedulable[name] = stringAt(cs, "message")
				}
			}
		}
	}
	return out
}

// podConditionTrue: the pod's condition of type t is True.
func podConditionTrue(pod *structpb.Struct, t corev1.PodConditionType) bool {
	for _, c := range structAt(pod, "status").GetFields()["conditions"].GetListValue().GetValues() {
		if cs := c.GetStructValue(); stringAt(cs, "type") == string(t) {
			return stringAt(cs, "status") == string(corev1.ConditionTrue)
		}
	}
	return false
}

// fenceMargin covers the kubelet's own latency between a liveness
// failure and the kill, and the clocks of two processes.
const fenceMargin = 3

// fenceSeconds is how long after a postgres stops answering the kubelet has
// killed it, by its liveness probe (Kubernetes' defaults where a field is
// unset) and the termination grace that applies: the probe that started
// just before the hang succeeded, failureThreshold probes each a period
// apart then fail (the last after its timeout), then SIGTERM, and SIGKILL
// once the grace ran out. The failover Job promotes no standby before the
// lost primary has been silent that long: a primary that hung and resumes
// has been killed by then, with every session it could acknowledge on.
func fenceSeconds(period, failures, timeout, grace int64) int64 {
	return period*failures + timeout + grace + fenceMargin
}

// podFence is fenceSeconds of a pod's postgres container's liveness probe;
// false without one (nothing kills a hung postgres).
func podFence(pod *structpb.Struct) (int64, bool) {
	spec := structAt(pod, "spec")
	for _, c := range spec.GetFields()["containers"].GetListValue().GetValues() {
		cs := c.GetStructValue()
		if stringAt(cs, "name") != containerPostgres {
			continue
		}
		lp := structAt(cs, "livenessProbe")
		if lp == nil {
			return 0, false
		}
		num := func(s *structpb.Struct, key string, def int64) int64 {
			if v, ok := s.GetFields()[key]; ok {
				if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue >= 0 {
					return int64(n.NumberValue)
				}
			}
			return def
		}
		grace := num(lp, "terminationGracePeriodSeconds", num(spec, "terminationGracePeriodSeconds", 30))
		return fenceSeconds(num(lp, "periodSeconds", 10), num(lp, "failureThreshold", 3), num(lp, "timeoutSeconds", 1), grace), true
	}
	return 0, false
}

// desiredFence is fenceSeconds of the liveness probe this function composes.
func desiredFence() int64 {
	return fenceSeconds(livenessPeriod, livenessFailures, livenessTimeout, livenessKillGrace)
}

// settledInstances is what the pods would say when the StatefulSet's own
// status already counts every instance of the Database ready, updated and
// on the current revision (statefulSetReady): every pod ready. Otherwise
// nothing is known, and the pods are asked for.
func settledInstances(db *database, sts *appsv1.StatefulSet) instancePods {
	if !statefulSetReady(sts, db.Tier.Replicas) || !noneStopping(sts, db.Tier.Replicas) {
		return instancePods{}
	}
	out := instancePods{Resolved: true, FromStatus: true, Ready: make(map[string]bool, db.Tier.Replicas)}
	for k := range int(db.Tier.Replicas) {
		out.Ready[podName(db, k)] = true
	}
	return out
}

// noneStopping: the StatefulSet's status counts want pods that are not
// being deleted. The controller counts a pod being deleted in neither
// currentReplicas nor updatedReplicas, but in readyReplicas while it is
// ready: the one sign, without reading the pods, of a drain's eviction,
// whose primary is switched over from (planFailover). Under RollingUpdate
// statefulSetReady has asked it already (updatedReplicas); under OnDelete
// (updates deferred) it is asked here, and a pod on a revision between the
// current and the update one, counted in neither, only costs a read of
// the pods.
func noneStopping(sts *appsv1.StatefulSet, want int32) bool {
	st := sts.Status
	up := st.CurrentReplicas
	if st.CurrentRevision != st.UpdateRevision {
		up += st.UpdatedReplicas
	}
	return up == want
}

// lookupFailoverOutcome reads the failover Job's termination message from
// its pods: the last one that terminated with a message wins (a retried
// Job's earlier pods failed without one).
func lookupFailoverOutcome(req *fnv1.RunFunctionRequest) failoverOutcome {
	rs, ok := req.GetRequiredResources()[requirementFailoverPods]
	if !ok {
		return failoverOutcome{}
	}
	out := failoverOutcome{Resolved: true}
	for _, r := range rs.GetItems() {
		if o := decodeReport(terminationMessage(r.GetResource(), containerFailover, false), func(o *scripts.FailoverOutcome) bool { return o.Result != "" }); o != nil {
			out.FailoverOutcome = *o
		}
	}
	return out
}

// readFailoverRecord reads status.failover of the observed XR. Fields of
// the wrong type are taken as absent.
func readFailoverRecord(xr *structpb.Struct) *failoverRecord {
	s := structAt(xr, "status", "failover")
	if s == nil {
		return nil
	}
	r := &failoverRecord{}
	if n, ok := s.GetFields()["count"].GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue >= 0 && n.NumberValue < 1e12 {
		r.Count = int64(n.NumberValue)
	}
	if l := structAt(s, "last"); l != nil {
		e := &failoverEvent{From: stringAt(l, "from"), To: stringAt(l, "to"), Reason: stringAt(l, "reason"), LSN: stringAt(l, "lsn")}
		if n, ok := l.GetFields()["timeline"].GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue >= 0 && n.NumberValue < 1e12 {
			e.Timeline = int64(n.NumberValue)
		}
		if t, err := time.Parse(time.RFC3339, stringAt(l, "time")); err == nil {
			e.Time = &metav1.Time{Time: t}
		}
		r.Last = e
	}
	return r
}
