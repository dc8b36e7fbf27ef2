package main

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// The supervised roll (docs/failover.md, "Updates"). A new pod template (a
// new function version changing a script, a minor version, a size change)
// used to roll the instances from the highest ordinal down, whichever was
// the primary: the primary was restarted in place, writes stopped for its
// restart, and failover was held off meanwhile. Every Database of a fleet
// did that at once when the function was upgraded.
//
// Now the StatefulSet's rollingUpdate.partition is the function's: at rest
// it is the number of instances, so a new template rolls nothing by itself,
// and the function lowers it one decision at a time, from observed state
// only (the StatefulSet's revisions and each instance pod's
// controller-revision-hash), so that no instance is ever restarted by the
// roll while it is the primary:
//
//   - a standby above the primary runs the old template: partition
//     primary+1 (the controller rolls those, highest first, one at a time,
//     each waiting for the one before to be ready);
//   - every standby above the primary is updated: a switchover (the
//     failover Job with a target) to an updated standby, or, with the
//     primary at the highest ordinal, to the standby below it;
//   - the primary is updated: partition at the lowest ordinal not updated
//     (only standbys are left);
//   - everything updated: the partition back at the number of instances.
//
// With one instance, or failover off in the input (no switchover), the
// standbys still roll first and the primary last, restarted in place.
const (
	condUpdated = "Updated"

	reasonUpToDate      = "UpToDate"
	reasonRolling       = "Rolling"
	reasonRollSwitching = "SwitchingOver"
	reasonRollWaits     = "SwitchoverWaits"
	reasonDeferred      = "Deferred"

	// reasonUpdate is status.failover.last.reason of a switchover the roll
	// asked for.
	reasonUpdate = "Update"

	// labelRevision is set by the StatefulSet controller on each pod: the
	// revision of the template it was created from.
	labelRevision = appsv1.ControllerRevisionHashLabelKey

	// updateSwitchoverAttempts is how many switchovers for one revision may
	// end without promoting before the roll restarts the primary in place,
	// as it would with failover off: a restart loses nothing, and each
	// attempt fences the primary read-only for a while (a target that
	// never catches up must not stop writes again and again).
	updateSwitchoverAttempts = 3
)

// rollRecord is status.update: what the roll must remember across
// reconciles, written only when there is something to remember.
type rollRecord struct {
	// Revision is the StatefulSet's updateRevision the record is about.
	Revision string `json:"revision"`
	// FailedSwitchovers counts switchovers for it that ended without
	// promoting.
	FailedSwitchovers int64 `json:"failedSwitchovers,omitempty"`
}

// readRollRecord reads status.update of the observed XR; fields of the
// wrong type are taken as absent.
func readRollRecord(xr *structpb.Struct) *rollRecord {
	s := structAt(xr, "status", "update")
	if s == nil {
		return nil
	}
	r := &rollRecord{Revision: stringAt(s, "revision")}
	if n, ok := s.GetFields()["failedSwitchovers"].GetKind().(*structpb.Value_NumberValue); ok && n.NumberValue >= 0 && n.NumberValue < 1e6 {
		r.FailedSwitchovers = int64(n.NumberValue)
	}
	return r
}

// rollPlan is what happens about a new pod template. makePlan always sets
// one; the questions failover asks of it (restartsPrimary, holds,
// switchoverTarget) answer "no roll" on a nil plan, so a plan built without
// Roll (a test's, a future stage's) fails over as if nothing rolled.
type rollPlan struct {
	// Rolling: the controller has not recorded the roll as done
	// (updateRevision is not its currentRevision, which it moves once every
	// instance is updated and ready); Pending: some instance does not run
	// the new template yet.
	Rolling bool
	Pending bool
	// Known: which instances run the new template was read from their
	// pods (Updated); otherwise the partition stays where it is.
	Known   bool
	Updated map[int]bool
	// Observed is the partition the observed StatefulSet has (0 when it
	// has none: a StatefulSet composed before the roll was supervised).
	Observed     int32
	HasPartition bool
	// Exists: the StatefulSet was observed; OnDelete: with updates deferred
	// (its strategy OnDelete: the controller restarts nothing itself).
	Exists   bool
	OnDelete bool
	// Deferred: the input's updates.policy is Deferred; the StatefulSet is
	// composed OnDelete and nothing is restarted for a new template.
	Deferred bool
	// UpdatedCount is how many instances run the new template, by the
	// StatefulSet's status; Revision is its updateRevision.
	UpdatedCount int32
	Revision     string
	// Failures counts the switchovers for Revision that ended without
	// promoting (status.update, and this reconcile's); Record is what
	// status.update says next.
	Failures int64
	Record   *rollRecord
	// Partition is the one composed; Condition the Updated condition (its
	// Type empty before the StatefulSet exists).
	Partition int32
	Condition condition
}

// readRoll reads what the observed StatefulSet and the instance pods say of
// a roll, for the p.Replicas instances composed.
func readRoll(db *database, p *plan, o *observed) *rollPlan {
	r := &rollPlan{Partition: p.Replicas, Deferred: db.DeferUpdates}
	sts := o.StatefulSet
	if sts == nil {
		return r
	}
	r.Exists = true
	r.OnDelete = sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType
	r.Observed, r.HasPartition = observedPartition(sts)
	st := sts.Status
	// Until the controller has seen the last spec, its revisions are those
	// of the one before: a template changed by this reconcile's apply is
	// read on the next. Under OnDelete the controller never moves
	// currentRevision: every instance updated is the end there.
	r.Rolling = st.UpdateRevision != "" && st.UpdateRevision != st.CurrentRevision
	r.Pending = r.Rolling && st.UpdatedReplicas < st.Replicas
	r.UpdatedCount, r.Revision = st.UpdatedReplicas, st.UpdateRevision
	if rec := o.RollRecord; rec != nil && r.Rolling && rec.Revision == st.UpdateRevision {
		r.Failures = rec.FailedSwitchovers
	}
	if !r.Rolling || !o.Instances.Resolved || o.Instances.FromStatus {
		return r
	}
	r.Known = true
	r.Updated = make(map[int]bool, p.Replicas)
	for k := range int(p.Replicas) {
		r.Updated[k] = o.Instances.Revision[podName(db, k)] == st.UpdateRevision
	}
	return r
}

// observedPartition is the StatefulSet's rollingUpdate.partition, 0 and
// false when unset.
func observedPartition(sts *appsv1.StatefulSet) (int32, bool) {
	if u := sts.Spec.UpdateStrategy.RollingUpdate; u != nil && u.Partition != nil {
		return *u.Partition, true
	}
	return 0, false
}

// restartsPrimary: the roll may restart the primary's pod now (the
// partition the controller has reaches it and it is not known to run the
// new template). Failover waits then: failing over would turn a restart of
// seconds into a lost timeline for every client. Under the supervised roll
// this is only a primary restarted in place (one instance, failover off) or
// a partition lowered before a failover moved the primary.
func (r *rollPlan) restartsPrimary(primary int) bool {
	if r == nil || !r.Rolling || r.OnDelete || r.Observed > int32(primary) {
		return false
	}
	// An updated primary was restarted by the roll only in place, after
	// failed switchovers (or with failover off, when nothing fails over);
	// otherwise a switchover made it the primary after its restart.
	return !r.Updated[primary] || r.Failures >= updateSwitchoverAttempts
}

// holds: a switchover to target waits for the roll (target runs the old
// template, and would be switched away from again).
func (r *rollPlan) holds(target int) bool {
	return r != nil && r.Pending && !r.Updated[target]
}

// switchoverTarget is the updated standby the roll switches over to before
// the primary is updated, if the roll is at that step: every standby above
// the primary updated, the primary not. preferred is spec.primary (-1
// unset): taken when it is updated. With the primary at the highest
// ordinal and no standby above it, the standby just below it: it becomes
// the primary while the old one is rolled, then the roll switches to that
// one.
func (r *rollPlan) switchoverTarget(primary, replicas, preferred int) (int, bool) {
	if r == nil || !r.Known || r.Deferred || r.Updated[primary] || r.Failures >= updateSwitchoverAttempts {
		return 0, false
	}
	for k := primary + 1; k < replicas; k++ {
		if !r.Updated[k] {
			return 0, false
		}
	}
	switch {
	case preferred >= 0 && preferred < replicas && preferred != primary && r.Updated[preferred]:
		return preferred, true
	case primary+1 < replicas:
		return primary + 1, true
	case primary > 0:
		return primary - 1, true
	}
	return 0, false
}

// decide sets the partition and the Updated condition, once the failover
// plan has settled the primary for this reconcile.
func (r *rollPlan) decide(db *database, p *plan, o *observed) {
	if p.Failover != nil && p.Failover.UpdateSwitchoverFailed && r.Rolling {
		r.Failures++
	}
	if r.Rolling && r.Failures > 0 {
		r.Record = &rollRecord{Revision: r.Revision, FailedSwitchovers: r.Failures}
	}
	if r.Exists && !r.Pending {
		r.Condition = condition{condUpdated, fnv1.Status_STATUS_CONDITION_TRUE, reasonUpToDate, "every instance runs the current pod template"}
	}
	if r.Deferred && r.Pending {
		msg := "a new pod template waits (updates.policy Deferred in the function input): each instance takes it when its pod is next created for another reason; nothing is restarted for it"
		// From the StatefulSet's status: reading the pods for their names
		// would cost a second call on every reconcile of the wait.
		msg += fmt.Sprintf("; %d of %d instances run it", r.UpdatedCount, p.Replicas)
		r.Condition = condition{condUpdated, fnv1.Status_STATUS_CONDITION_FALSE, reasonDeferred, msg + ". Set updates.policy Supervised to roll them now"}
		return
	}
	if p.Replicas <= 1 {
		// One instance: nothing to switch over to; the roll restarts it.
		r.Partition = 0
		if r.Pending {
			r.Condition = condition{condUpdated, fnv1.Status_STATUS_CONDITION_FALSE, reasonRolling, fmt.Sprintf(
				"one instance: %s restarts on the new pod template, and is unavailable until it is ready", podName(db, 0))}
		}
		return
	}
	if !r.Pending {
		return
	}
	primary := p.Primary
	rolling := func(msg string) {
		r.Condition = condition{condUpdated, fnv1.Status_STATUS_CONDITION_FALSE, reasonRolling, msg}
	}
	if !r.Known || (p.Failover != nil && p.Failover.Job != nil) {
		// The pods not read yet (the first call of a reconcile), or a
		// failover or switchover running: the partition stays (a
		// StatefulSet composed before the roll was supervised has none:
		// the roll it began stops until its pods are read).
		if r.HasPartition {
			r.Partition = r.Observed
		}
		msg := "a new pod template is rolling out, standbys first"
		if p.Failover != nil && p.Failover.Job != nil {
			msg += fmt.Sprintf("; it waits for Job %s", p.Failover.Job.Name)
			if ann := p.Failover.Job.Annotations[annotationSwitchoverReason]; ann == reasonUpdate {
				r.Condition = condition{condUpdated, fnv1.Status_STATUS_CONDITION_FALSE, reasonRollSwitching, fmt.Sprintf(
					"every standby above the primary runs the new pod template: Job %s switches the primary over to one before the old primary restarts", p.Failover.Job.Name)}
				return
			}
		}
		rolling(msg)
		return
	}
	var old, done []string
	lowest := -1
	for k := range int(p.Replicas) {
		if r.Updated[k] {
			done = append(done, podName(db, k))
			continue
		}
		old = append(old, podName(db, k))
		if lowest < 0 {
			lowest = k
		}
	}
	if lowest < 0 {
		// Every instance runs it; the controller catches its own status up.
		r.Partition = p.Replicas
		rolling("every instance runs the new pod template; the StatefulSet records it")
		return
	}
	// The partition goes lower only while every instance is ready (or
	// crash-looping, which a restart cannot make worse, and which the new
	// template may mend): the controller replaces the highest ordinal at or
	// above it whatever that pod's state, and a standby that is still
	// cloning or rewinding must not be interrupted.
	waiting := ""
	for k := range int(p.Replicas) {
		if pod := podName(db, k); !o.Instances.Ready[pod] && !o.Instances.CrashLooping[pod] {
			waiting = pod
			break
		}
	}
	lower := func(to int) int32 {
		if waiting == "" {
			return int32(to)
		}
		at := p.Replicas
		if r.HasPartition {
			at = r.Observed
		}
		return max(at, int32(to))
	}
	progress := fmt.Sprintf("updated: %s; on the old template: %s", or(strings.Join(done, ", "), "none"), strings.Join(old, ", "))
	if waiting != "" {
		progress += fmt.Sprintf("; the next step waits for %s to be ready", waiting)
	}
	above := false
	for k := primary + 1; k < int(p.Replicas); k++ {
		above = above || !r.Updated[k]
	}
	switch {
	case r.Updated[primary]:
		r.Partition = lower(lowest)
		rolling(fmt.Sprintf("the primary %s runs the new pod template; the standbys follow one at a time (%s)", podName(db, primary), progress))
	case above:
		r.Partition = lower(primary + 1)
		rolling(fmt.Sprintf("standbys first, one at a time, the primary %s last and only after a switchover (%s)", podName(db, primary), progress))
	case !db.Failover:
		// No switchover without failover: the primary restarts in place,
		// after every standby above it.
		r.Partition = lower(lowest)
		rolling(fmt.Sprintf("failover is off in the function input, so no switchover: the primary %s restarts in place, writes stop until it is ready (%s)", podName(db, primary), progress))
	case r.Failures >= updateSwitchoverAttempts:
		r.Partition = lower(lowest)
		rolling(fmt.Sprintf("%d switchovers to an updated standby ended without promoting (the Failover condition and the Jobs' logs say why): the primary %s restarts in place instead, writes stop until it is ready (%s)", r.Failures, podName(db, primary), progress))
	default:
		r.Partition = lower(primary + 1)
		r.Condition = condition{condUpdated, fnv1.Status_STATUS_CONDITION_FALSE, reasonRollWaits, fmt.Sprintf(
			"the primary %s is switched over to an updated standby before it restarts; the switchover waits for every instance to be ready (%s)", podName(db, primary), progress)}
	}
}

// strategy is the StatefulSet's update strategy: OnDelete when updates are
// deferred, else RollingUpdate with the plan's partition (without a roll
// plan, a plan built by hand in a test, the resting one).
func (r *rollPlan) strategy(replicas int32) appsv1.StatefulSetUpdateStrategy {
	if r != nil && r.Deferred {
		return appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	partition := replicas
	switch {
	case r != nil:
		partition = r.Partition
	case replicas <= 1:
		partition = 0
	}
	return appsv1.StatefulSetUpdateStrategy{
		Type:          appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)},
	}
}
