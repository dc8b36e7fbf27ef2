package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// rollSim plays the StatefulSet controller and the failover Job against the
// function, one reconcile per tick: the controller honours the partition
// the function composes (it replaces the highest ordinal at or above it
// that runs an old revision, one at a time, only while every pod is ready),
// and a switchover Job promotes its target at once. It counts what the
// supervised roll promises never happens: an instance restarted by the
// roll while it is the primary.
type rollSim struct {
	t        *testing.T
	req      *fnv1.RunFunctionRequest
	name     string
	rev      []string
	ready    []bool
	crashing map[int]bool
	primary  int // the instance that really is the primary
	timeline int
	handled  map[string]bool // failover Jobs played, by count
	jobPod   *structpb.Struct

	// What happened, in order: "restart N-k" (standby), "RESTART N-k" (the
	// primary), "switchover N-a→N-b".
	events            []string
	conditions        []string
	restartsAsPrimary int
	// current: every instance runs the template last composed.
	current    bool
	currentRev string
	// failSwitchovers: every switchover Job ends without an outcome (as on
	// a plane whose pods run nothing).
	failSwitchovers bool
}

// templateRevision names a pod template as the controller would: a hash of
// it.
func templateRevision(t *testing.T, name string, sts *appsv1.StatefulSet) string {
	t.Helper()
	b, err := json.Marshal(sts.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s-%x", name, sha256.Sum256(b))[:len(name)+11]
}

func (s *rollSim) pods() []*structpb.Struct {
	var out []*structpb.Struct
	for k := range s.rev {
		pod := fmt.Sprintf("%s-%d", s.name, k)
		out = append(out, yamlStruct(s.t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: data
  labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: %s, app.kubernetes.io/component: database, statefulset.kubernetes.io/pod-name: %s, controller-revision-hash: %s}
status:
  conditions: [{type: Ready, status: "%s"}]
  containerStatuses: [{name: postgres, state: {%s}}]
`, pod, s.name, pod, s.rev[k], map[bool]string{true: "True", false: "False"}[s.ready[k]],
			map[bool]string{true: "waiting: {reason: CrashLoopBackOff}", false: "running: {}"}[s.crashing[k]])))
	}
	return out
}

// observe sets the observed StatefulSet's status from the pods, as the
// controller reports it.
func (s *rollSim) observe(update string) {
	n, ready, updated := len(s.rev), 0, 0
	for k := range s.rev {
		if s.ready[k] {
			ready++
		}
		if s.rev[k] == update {
			updated++
		}
	}
	// currentRevision moves once every instance is updated and ready.
	if s.currentRev == "" {
		s.currentRev = s.rev[0]
	}
	if updated == n && ready == n {
		s.currentRev = update
	}
	current, onCurrent := s.currentRev, 0
	for k := range s.rev {
		if s.rev[k] == current {
			onCurrent++
		}
	}
	setObservedStatus(s.t, s.req, rnStatefulSet, map[string]any{
		"observedGeneration": 1, "replicas": float64(n), "readyReplicas": float64(ready), "updatedReplicas": float64(updated),
		"currentReplicas": float64(onCurrent), "currentRevision": current, "updateRevision": update,
	})
}

// tick is one reconcile, then what the cluster does with its result.
func (s *rollSim) tick() *fnv1.RunFunctionResponse {
	s.t.Helper()
	sts := decodeInto[appsv1.StatefulSet](s.t, s.req.Observed.Resources[string(rnStatefulSet)].GetResource())
	update := templateRevision(s.t, s.name, sts)
	s.observe(update)
	cluster := append(append(exampleCluster(s.t), s.pods()...), s.jobPod)
	if s.jobPod == nil {
		cluster = cluster[:len(cluster)-1]
	}
	rsp := runTestIn(s.t, s.req, cluster)
	if c := conditionOf(rsp, condUpdated); c != nil && (len(s.conditions) == 0 || s.conditions[len(s.conditions)-1] != c.GetReason()) {
		s.conditions = append(s.conditions, c.GetReason())
	}
	feedBack(s.t, s.req, rsp, true)
	s.jobPod = nil

	// The failover Job, run to its end at once.
	if j := s.req.Observed.Resources[string(rnFailover)].GetResource(); j != nil {
		job := decodeInto[batchv1.Job](s.t, j)
		count := job.Annotations[annotationFailoverCount]
		target, err := strconv.Atoi(job.Annotations[annotationFailoverTarget])
		if err != nil {
			s.t.Fatalf("a failover Job that is no switchover: %v", job.Annotations)
		}
		if !s.handled[count] && s.failSwitchovers {
			s.handled[count] = true
			s.events = append(s.events, "switchover failed")
			s.jobPod = failoverJobPod(s.t, s.req, "")
		} else if s.failSwitchovers {
			s.jobPod = failoverJobPod(s.t, s.req, "")
		} else if !s.handled[count] {
			s.handled[count] = true
			s.events = append(s.events, fmt.Sprintf("switchover %s-%d→%s-%d", s.name, s.primary, s.name, target))
			s.timeline++
			s.jobPod = failoverJobPod(s.t, s.req, fmt.Sprintf(`{"result":"promoted","from":%d,"to":%d,"timeline":%d,"lsn":"0/7000000"}`, s.primary, target, s.timeline))
			s.primary = target
		} else {
			// Recorded by now, or being read: the pod stays until dropped.
			s.jobPod = failoverJobPod(s.t, s.req, fmt.Sprintf(`{"result":"promoted","from":%s,"to":%d,"timeline":%d,"lsn":"0/7000000"}`, job.Annotations[annotationFailoverFrom], target, s.timeline))
		}
	}

	// The controller, with the partition just applied.
	desired := desiredSTS(s.t, rsp)
	next := templateRevision(s.t, s.name, desired)
	partition := int(*desired.Spec.UpdateStrategy.RollingUpdate.Partition)
	s.current = !slices.ContainsFunc(s.rev, func(r string) bool { return r != next })
	for k := range s.ready {
		if !s.ready[k] {
			s.ready[k] = true // it starts, and is ready at the next tick
			return rsp
		}
	}
	for k := len(s.rev) - 1; k >= partition; k-- {
		if s.rev[k] != next {
			s.rev[k], s.ready[k] = next, false
			if k == s.primary {
				s.restartsAsPrimary++
				s.events = append(s.events, fmt.Sprintf("RESTART %s-%d", s.name, k))
			} else {
				s.events = append(s.events, fmt.Sprintf("restart %s-%d", s.name, k))
			}
			break
		}
	}
	return rsp
}

// TestSupervisedRoll: a new pod template (a minor version) on a running
// Database rolls every instance once, standbys first, and never restarts
// the primary: it is switched over to an updated standby first. The
// simulated controller honours the composed partition.
func TestSupervisedRoll(t *testing.T) {
	cases := map[string]struct {
		xr      string
		primary int
		// setup changes the running Database before the new version.
		setup      func(req *fnv1.RunFunctionRequest)
		want       []string
		wantPrimay int
		// asPrimary is how many restarts of the primary are expected
		// (failover off: the primary restarts in place, last).
		asPrimary int
		fail      bool
	}{
		"SwitchoverFails": {
			// Every switchover ends without promoting: after three the
			// primary restarts in place, as with failover off.
			xr: "example/xrs/large.yaml", fail: true,
			want:       []string{"restart analytics-2", "restart analytics-1", "switchover failed", "switchover failed", "switchover failed", "RESTART analytics-0"},
			wantPrimay: 0, asPrimary: 1,
		},
		"PrimaryAtZero": {
			xr:   "example/xrs/large.yaml",
			want: []string{"restart analytics-2", "restart analytics-1", "switchover analytics-0→analytics-1", "restart analytics-0"},
			// The primary stays where the switchover put it.
			wantPrimay: 1,
		},
		"PrimaryAtTheTop": {
			xr: "example/xrs/large.yaml", primary: 2,
			// No standby above it: switched to the one below, rolled, then
			// switched to the updated top before the rest follow.
			want:       []string{"switchover analytics-2→analytics-1", "restart analytics-2", "switchover analytics-1→analytics-2", "restart analytics-1", "restart analytics-0"},
			wantPrimay: 2,
		},
		"PrimaryInTheMiddle": {
			xr: "example/xrs/large.yaml", primary: 1,
			want:       []string{"restart analytics-2", "switchover analytics-1→analytics-2", "restart analytics-1", "restart analytics-0"},
			wantPrimay: 2,
		},
		"SpecPrimaryKept": {
			// spec.primary names ordinal 0: the roll's switchover goes to
			// an updated standby, and spec.primary brings the primary back
			// once ordinal 0 runs the new template.
			xr: "example/xrs/large.yaml",
			setup: func(req *fnv1.RunFunctionRequest) {
				setSpecField(req, "primary", structpb.NewNumberValue(0))
			},
			want:       []string{"restart analytics-2", "restart analytics-1", "switchover analytics-0→analytics-1", "restart analytics-0", "switchover analytics-1→analytics-0"},
			wantPrimay: 0,
		},
		"FailoverOff": {
			xr: "example/xrs/large.yaml",
			setup: func(req *fnv1.RunFunctionRequest) {
				req.Input.Fields["failover"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"enabled": structpb.NewBoolValue(false)}})
			},
			want:       []string{"restart analytics-2", "restart analytics-1", "RESTART analytics-0"},
			wantPrimay: 0, asPrimary: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			if tc.setup != nil {
				tc.setup(req)
			}
			s := &rollSim{t: t, req: req, name: "analytics", primary: tc.primary, timeline: 1 + tc.primary, handled: map[string]bool{}, failSwitchovers: tc.fail}
			if tc.primary != 0 {
				setObservedPrimary(req, strconv.Itoa(tc.primary))
				setFailoverRecord(t, req, fmt.Sprintf(`{count: 1, last: {from: analytics-0, to: analytics-%d, reason: PrimaryLost, timeline: %d}}`, tc.primary, s.timeline))
			}
			sts := decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource())
			for range 3 {
				s.rev, s.ready = append(s.rev, templateRevision(t, "analytics", sts)), append(s.ready, true)
			}
			// Settle at rest first: nothing rolls.
			for range 3 {
				s.tick()
			}
			if len(s.events) != 0 {
				t.Fatalf("at rest: %v", s.events)
			}
			setSpecField(req, "version", structpb.NewStringValue("16.6"))
			var rsp *fnv1.RunFunctionResponse
			for i := 0; ; i++ {
				if i == 60 {
					t.Fatalf("the roll did not end in 60 reconciles: %v; conditions %v", s.events, s.conditions)
				}
				rsp = s.tick()
				if c := conditionOf(rsp, condUpdated); s.current && !slices.Contains(s.ready, false) && c.GetReason() == reasonUpToDate && rsp.GetDesired().GetResources()[string(rnFailover)] == nil {
					break
				}
			}
			// Then at rest: what follows the roll (spec.primary's own
			// switchover) ends, and fed back, nothing changes.
			for i := 0; ; i++ {
				before := desiredOf(rsp)
				rsp = s.tick()
				if diffProto(before, desiredOf(rsp)) == "" {
					break
				}
				if i == 10 {
					t.Fatalf("no rest after the roll: %v", s.events)
				}
			}
			if d := cmp.Diff(tc.want, s.events); d != "" {
				t.Errorf("the roll (-want +got):\n%s", d)
			}
			if s.restartsAsPrimary != tc.asPrimary {
				t.Errorf("%d restarts of the primary by the roll, want %d", s.restartsAsPrimary, tc.asPrimary)
			}
			got := failoverStateOf(t, rsp)
			if got.Primary != strconv.Itoa(tc.wantPrimay) || got.Primary != strconv.Itoa(s.primary) || got.Selector != fmt.Sprintf("analytics-%d", s.primary) {
				t.Errorf("after the roll: ConfigMap primary %s, selector %s; the primary is analytics-%d, want analytics-%d", got.Primary, got.Selector, s.primary, tc.wantPrimay)
			}
			if p := int(*desiredSTS(t, rsp).Spec.UpdateStrategy.RollingUpdate.Partition); p != 3 {
				t.Errorf("partition at rest %d, want 3", p)
			}
			if strings.Contains(strings.Join(s.events, " "), "switchover ") && !tc.fail {
				if r := stringAt(rsp.GetDesired().GetComposite().GetResource(), "status", "failover", "last", "reason"); r != reasonUpdate && !slices.Contains([]string{"SpecPrimaryKept"}, name) {
					t.Errorf("status.failover.last.reason %q, want %s", r, reasonUpdate)
				}
			}
			t.Logf("conditions: %v", s.conditions)
			if tc.fail && rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["update"] != nil {
				t.Errorf("status.update kept after the roll ended")
			}
		})
	}
}

// TestRollHolds: mid-roll, what the function does when an instance is not
// ready. The roll is at its first step (analytics-2 updated, the primary
// analytics-0).
func TestRollHolds(t *testing.T) {
	cases := map[string]struct {
		ready    []bool
		crashing map[int]bool
		// want is the composed partition; job whether a failover Job is.
		want int32
		job  bool
	}{
		"AllReady": {ready: []bool{true, true, true}, want: 1},
		// analytics-1 still cloning: it is not restarted under it.
		"StandbyNotReady": {ready: []bool{true, false, true}, want: 2},
		// Crash-looping on the old template: the new one may mend it.
		"StandbyCrashLooping": {ready: []bool{true, false, true}, crashing: map[int]bool{1: true}, want: 1},
		// The primary lost mid-roll: the roll does not touch it (the
		// partition is above it), so failover goes ahead.
		"PrimaryLost": {ready: []bool{false, true, true}, want: 2, job: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			s := &rollSim{t: t, req: req, name: "analytics", timeline: 1, handled: map[string]bool{}, crashing: tc.crashing}
			old := templateRevision(t, "analytics", decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource()))
			setSpecField(req, "version", structpb.NewStringValue("16.6"))
			rsp := runTest(t, req)
			feedBack(t, req, rsp, true)
			sts := decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource())
			if p := *sts.Spec.UpdateStrategy.RollingUpdate.Partition; p != 3 {
				t.Fatalf("the new template composed with partition %d, want 3 (nothing rolls by itself)", p)
			}
			// The controller rolled analytics-2 at partition 2 before.
			sts.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](2)
			req.Observed.Resources[string(rnStatefulSet)] = encodeObserved(t, sts)
			s.rev = []string{old, old, templateRevision(t, "analytics", sts)}
			s.ready = tc.ready
			s.observe(s.rev[2])
			rsp = runTestIn(t, req, append(exampleCluster(t), s.pods()...))
			if p := *desiredSTS(t, rsp).Spec.UpdateStrategy.RollingUpdate.Partition; p != tc.want {
				t.Errorf("partition %d, want %d; Updated: %s", p, tc.want, conditionOf(rsp, condUpdated).GetMessage())
			}
			if got := failoverStateOf(t, rsp).Job; got != tc.job {
				t.Errorf("failover Job composed: %v, want %v", got, tc.job)
			}
			t.Logf("Updated: %s", conditionOf(rsp, condUpdated).GetMessage())
		})
	}
}

// TestRollDeferred: with updates.policy Deferred a new pod template
// restarts nothing (the StatefulSet is OnDelete), the Database stays Ready,
// condition Updated names the instances still on the old template, and no
// switchover starts; back to Supervised, the roll goes on from where the
// natural restarts left it.
func TestRollDeferred(t *testing.T) {
	req := largeSteady(t)
	policy := func(p string) {
		req.Input.Fields["updates"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"policy": structpb.NewStringValue(p)}})
	}
	policy("Deferred")
	s := &rollSim{t: t, req: req, name: "analytics", timeline: 1, handled: map[string]bool{}}
	old := templateRevision(t, "analytics", decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource()))
	setSpecField(req, "version", structpb.NewStringValue("16.6"))
	rsp := runTest(t, req)
	feedBack(t, req, rsp, true)
	sts := decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource())
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || sts.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Fatalf("update strategy %+v, want OnDelete", sts.Spec.UpdateStrategy)
	}
	next := templateRevision(t, "analytics", sts)
	// analytics-2's pod was deleted (a drain): it came back on the new
	// template; the others run the old one.
	s.rev, s.ready = []string{old, old, next}, []bool{true, true, true}
	s.observe(next)
	rsp = runTestIn(t, req, append(exampleCluster(t), s.pods()...))
	c := conditionOf(rsp, condUpdated)
	if c.GetReason() != reasonDeferred || !strings.Contains(c.GetMessage(), "1 of 3 instances run it") {
		t.Errorf("Updated %s: %s; want %s, 1 of 3 instances updated", c.GetReason(), c.GetMessage(), reasonDeferred)
	}
	if rq := rsp.GetRequirements().GetResources(); len(rq) != 0 {
		t.Errorf("while deferred, a reconcile asks for %v: one call is enough", slices.Collect(maps.Keys(rq)))
	}
	if got := failoverStateOf(t, rsp); got.Job {
		t.Errorf("a switchover Job while updates are deferred")
	}
	if r := rsp.GetDesired().GetResources()[string(rnStatefulSet)].GetReady(); r != fnv1.Ready_READY_TRUE {
		t.Errorf("the StatefulSet's readiness %s while deferred, want READY_TRUE (every instance serves)", r)
	}
	if st := desiredSTS(t, rsp).Spec.UpdateStrategy; st.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("update strategy %+v, want OnDelete", st)
	}

	// Supervised again (a maintenance window opens): RollingUpdate at rest
	// first, then, the pods read, the partition above the primary.
	policy("Supervised")
	feedBack(t, req, rsp, true)
	s.observe(next)
	rsp = runTestIn(t, req, append(exampleCluster(t), s.pods()...))
	if st := desiredSTS(t, rsp).Spec.UpdateStrategy; st.Type != appsv1.RollingUpdateStatefulSetStrategyType || *st.RollingUpdate.Partition != 3 {
		t.Fatalf("back to Supervised: %+v, want RollingUpdate at partition 3", st)
	}
	feedBack(t, req, rsp, true)
	s.observe(next)
	rsp = runTestIn(t, req, append(exampleCluster(t), s.pods()...))
	if p := *desiredSTS(t, rsp).Spec.UpdateStrategy.RollingUpdate.Partition; p != 1 {
		t.Errorf("partition %d, want 1 (analytics-1 next, the primary analytics-0 after a switchover)", p)
	}
}

// A plan without a roll is a plan with nothing rolling: failover asks it
// and goes on.
func TestRollPlanNil(t *testing.T) {
	var r *rollPlan
	if r.restartsPrimary(0) || r.holds(1) {
		t.Errorf("a nil roll plan restarts the primary or holds a switchover")
	}
	if _, ok := r.switchoverTarget(0, 3, -1); ok {
		t.Errorf("a nil roll plan asks for a switchover")
	}
}
