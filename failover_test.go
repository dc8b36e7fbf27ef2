package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// failoverState is what a response says about failover.
type failoverState struct {
	Job       bool
	JobFrom   string // the Job's PRIMARY_ORDINAL
	Primary   string // ConfigMap key primary
	Selector  string // the rw Service's pod-name selector
	Status    string // status.primary
	Count     float64
	LastTo    string
	Condition string // status/reason of the Failover condition
	Replicas  int32
	Requires  []string
}

func failoverStateOf(t *testing.T, rsp *fnv1.RunFunctionResponse) failoverState {
	t.Helper()
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("Fatal: %s", r.GetMessage())
		}
	}
	rs := rsp.GetDesired().GetResources()
	cm := decodeInto[corev1.ConfigMap](t, rs[string(rnScripts)].GetResource())
	svc := decodeInto[corev1.Service](t, rs[string(rnService)].GetResource())
	st := rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue()
	s := failoverState{
		Primary:  cm.Data[keyPrimary],
		Selector: svc.Spec.Selector[labelPodName],
		Status:   st.GetFields()["primary"].GetStringValue(),
		Count:    structAt(st, "failover").GetFields()["count"].GetNumberValue(),
		LastTo:   stringAt(st, "failover", "last", "to"),
		Replicas: *desiredSTS(t, rsp).Spec.Replicas,
	}
	if c := conditionOf(rsp, condFailover); c != nil {
		s.Condition = fmt.Sprintf("%s/%s", c.GetStatus(), c.GetReason())
	}
	if j := rs[string(rnFailover)].GetResource(); j != nil {
		s.Job = true
		job := decodeInto[batchv1.Job](t, j)
		for _, e := range job.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "PRIMARY_ORDINAL" {
				s.JobFrom = e.Value
			}
		}
	}
	s.Requires = slices.Sorted(maps.Keys(rsp.GetRequirements().GetResources()))
	return s
}

// instancePodsReady are the pods of analytics (example/xrs/large.yaml), ready
// as given.
func instancePodsReady(t *testing.T, ready ...bool) []*structpb.Struct {
	t.Helper()
	var out []*structpb.Struct
	for k, r := range ready {
		name := fmt.Sprintf("analytics-%d", k)
		out = append(out, yamlStruct(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: data
  labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: analytics, app.kubernetes.io/component: database, statefulset.kubernetes.io/pod-name: %s}
status:
  conditions: [{type: Ready, status: "%v"}]
`, name, name, map[bool]string{true: "True", false: "False"}[r])))
	}
	return out
}

// failoverJobPod is the pod of the observed failover Job, terminated with
// this message.
func failoverJobPod(t *testing.T, req *fnv1.RunFunctionRequest, message string) *structpb.Struct {
	t.Helper()
	uid := stringAt(req.GetObserved().GetResources()[string(rnFailover)].GetResource(), "metadata", "uid")
	return yamlStruct(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: analytics-failover-x7k2p
  namespace: data
  labels: {batch.kubernetes.io/controller-uid: %q}
status:
  containerStatuses:
  - name: failover
    state: {terminated: {exitCode: 0, message: %q}}
`, uid, message))
}

// TestFailoverLifecycle plays a failover reconcile by reconcile against the
// large example: the primary's pod turns unready, a Job is composed, it
// promotes ordinal 2, the function records it and moves the primary, then
// drops the Job; the result is a fixed point.
func TestFailoverLifecycle(t *testing.T) {
	req := xrRequest(readYAMLStruct(t, "example/xrs/large.yaml"), compositionInput(t, "example/composition.yaml"))
	rsp := runTest(t, req)
	for range 2 {
		feedBack(t, req, rsp, true)
		rsp = runTest(t, req)
	}
	// Healthy (the StatefulSet's status counts every instance ready): the
	// pods are not asked for, so a reconcile is one call. Once one is not
	// ready, they are.
	requires := []string{requirementInstances}
	steady := failoverState{Primary: "0", Selector: "analytics-0", Status: "analytics-0", Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3}
	if d := cmp.Diff(steady, failoverStateOf(t, rsp)); d != "" {
		t.Fatalf("steady state (-want +got):\n%s", d)
	}

	cluster := func(extra ...*structpb.Struct) []*structpb.Struct {
		return append(append([]*structpb.Struct{}, exampleCluster(t)...), extra...)
	}
	steps := []struct {
		name    string
		cluster []*structpb.Struct
		// mutate changes the request before the call (after the feed-back).
		mutate func(req *fnv1.RunFunctionRequest)
		want   failoverState
	}{
		{
			name:    "PrimaryUnready",
			cluster: cluster(instancePodsReady(t, false, true, true)...),
			want:    failoverState{Job: true, JobFrom: "0", Primary: "0", Selector: "analytics-0", Status: "analytics-0", Condition: "STATUS_CONDITION_TRUE/InProgress", Replicas: 3, Requires: requires},
		},
		{
			// The Job completed; Crossplane has not yet fetched its pod.
			name:    "JobDoneOutcomeNotRead",
			cluster: cluster(instancePodsReady(t, false, true, true)...),
			mutate: func(req *fnv1.RunFunctionRequest) {
				delete(req.RequiredResources, requirementFailoverPods)
			},
			want: failoverState{Job: true, JobFrom: "0", Primary: "0", Selector: "analytics-0", Status: "analytics-0", Condition: "STATUS_CONDITION_TRUE/InProgress", Replicas: 3, Requires: []string{requirementFailoverPods, requirementInstances}},
		},
		{
			name: "Promoted",
			want: failoverState{Job: true, JobFrom: "0", Primary: "2", Selector: "analytics-2", Status: "analytics-2", Count: 1, LastTo: "analytics-2", Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3, Requires: []string{requirementFailoverPods, requirementInstances}},
		},
		{
			// Recorded and read back: the Job goes; the old primary is a
			// standby now, and every pod is ready.
			name:    "Recorded",
			cluster: cluster(instancePodsReady(t, true, true, true)...),
			want:    failoverState{Primary: "2", Selector: "analytics-2", Status: "analytics-2", Count: 1, LastTo: "analytics-2", Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3},
		},
		{
			// A smaller size would delete ordinal 2, the primary.
			name:    "ScaleInBelowPrimary",
			cluster: cluster(instancePodsReady(t, true, true, true)...),
			mutate: func(req *fnv1.RunFunctionRequest) {
				req.Observed.Composite.Resource.GetFields()["spec"].GetStructValue().Fields["size"] = structpb.NewStringValue("medium")
			},
			want: failoverState{Primary: "2", Selector: "analytics-2", Status: "analytics-2", Count: 1, LastTo: "analytics-2", Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3, Requires: requires},
		},
	}
	for i, s := range steps {
		feedBack(t, req, rsp, true)
		if s.name == "Promoted" {
			s.cluster = cluster(append(instancePodsReady(t, false, true, true),
				failoverJobPod(t, req, `{"result":"promoted","from":0,"to":2,"timeline":2,"lsn":"0/5000060"}`))...)
		}
		if s.mutate != nil {
			s.mutate(req)
		}
		// The feed-back marks every Job complete: the first step needs it
		// running, as Crossplane would observe a Job it just created.
		if i == 0 {
			delete(req.Observed.Resources, string(rnFailover))
		}
		if i == 1 {
			// Crossplane's first call of a reconcile has no required resources.
			statusFromPods(req, s.cluster)
			rsp = runOnce(t, req)
		} else {
			rsp = runTestIn(t, req, s.cluster)
		}
		if d := cmp.Diff(s.want, failoverStateOf(t, rsp)); d != "" {
			t.Errorf("%s (-want +got):\n%s", s.name, d)
		}
		if s.name == "ScaleInBelowPrimary" {
			if c := conditionOf(rsp, condSpecApplied); c.GetReason() != reasonScaleInBlocked {
				t.Errorf("SpecApplied reason %q, want %s: %s", c.GetReason(), reasonScaleInBlocked, c.GetMessage())
			}
		}
	}

	// A fixed point: fed back again, the desired state is the same.
	feedBack(t, req, rsp, true)
	next := runTestIn(t, req, cluster(instancePodsReady(t, true, true, true)...))
	if d := diffProto(desiredOf(rsp), desiredOf(next)); d != "" {
		t.Errorf("after the failover, desired state changed when fed back (-prev +next):\n%s", d)
	}
}

// TestFailoverNotStarted: no Job when failing over would be wrong or
// impossible.
func TestFailoverNotStarted(t *testing.T) {
	cases := map[string]struct {
		xr     string
		input  func(in *structpb.Struct)
		rollin bool
		want   string // Failover condition
	}{
		"SingleInstance": {xr: "example/xrs/small.yaml", want: "STATUS_CONDITION_FALSE/SingleInstance"},
		"Disabled": {xr: "example/xrs/large.yaml", input: func(in *structpb.Struct) {
			in.Fields["failover"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"enabled": structpb.NewBoolValue(false)}})
		}, want: "STATUS_CONDITION_FALSE/Disabled"},
		// A roll restarts the primary on purpose: one whose partition
		// reaches the primary (a StatefulSet composed before the roll was
		// supervised has none).
		"Rolling": {xr: "example/xrs/large.yaml", rollin: true, want: "STATUS_CONDITION_FALSE/PrimaryReady"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := proto.CloneOf(compositionInput(t, "example/composition.yaml"))
			if tc.input != nil {
				tc.input(in)
			}
			req := xrRequest(readYAMLStruct(t, tc.xr), in)
			rsp := runTest(t, req)
			feedBack(t, req, rsp, true)
			rsp = runTest(t, req)
			feedBack(t, req, rsp, true)
			if tc.rollin {
				sts := req.Observed.Resources[string(rnStatefulSet)].GetResource()
				structAt(sts, "status").Fields["updateRevision"] = structpb.NewStringValue("analytics-new")
				structAt(sts, "status").Fields["updatedReplicas"] = structpb.NewNumberValue(0)
				delete(structAt(sts, "spec").Fields, "updateStrategy")
			}
			name := stringAt(req.Observed.Composite.Resource, "metadata", "name")
			ns := stringAt(req.Observed.Composite.Resource, "metadata", "namespace")
			pods := []*structpb.Struct{yamlStruct(t, fmt.Sprintf(`{apiVersion: v1, kind: Pod, metadata: {name: %s-0, namespace: %s, labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: %s, app.kubernetes.io/component: database}}, status: {conditions: [{type: Ready, status: "False"}]}}`, name, ns, name))}
			rsp = runTestIn(t, req, append(append([]*structpb.Struct{}, exampleCluster(t)...), pods...))
			got := failoverStateOf(t, rsp)
			if got.Job || got.Condition != tc.want {
				t.Errorf("Job %v, condition %s; want no Job and %s", got.Job, got.Condition, tc.want)
			}
		})
	}
}

// TestFailoverJobSecure: the failover Job passes the same Pod Security and
// container checks as every other pod the function composes.
func TestFailoverJobSecure(t *testing.T) {
	db := testDB()
	j := failoverJob(db, 0, 0, "postgres:16", 3, -1, reasonPrimaryLost, nil)
	if j.Spec.ActiveDeadlineSeconds == nil || j.Spec.BackoffLimit == nil {
		t.Error("the failover Job must be bounded (activeDeadlineSeconds, backoffLimit)")
	}
	c := j.Spec.Template.Spec.Containers[0]
	if c.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("terminationMessagePolicy %q: the outcome is the termination message", c.TerminationMessagePolicy)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil {
		t.Errorf("container security context not restricted: %+v", sc)
	}
	if p := j.Spec.Template.Spec; p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
		t.Error("the failover pod must not mount a ServiceAccount token: it talks to PostgreSQL only")
	}
}

// TestSwitchover: spec.primary moves the primary on purpose once every
// instance is ready, and the record says Switchover.
func TestSwitchover(t *testing.T) {
	xr := readYAMLStruct(t, "example/xrs/large.yaml")
	req := xrRequest(xr, compositionInput(t, "example/composition.yaml"))
	rsp := runTest(t, req)
	for range 2 {
		feedBack(t, req, rsp, true)
		rsp = runTest(t, req)
	}
	xr.GetFields()["spec"].GetStructValue().Fields["primary"] = structpb.NewNumberValue(1)
	cluster := append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, true, false, true)...)

	// A standby is not ready: the switchover waits.
	feedBack(t, req, rsp, true)
	rsp = runTestIn(t, req, cluster)
	if got := failoverStateOf(t, rsp); got.Job || got.Condition != "STATUS_CONDITION_FALSE/"+reasonSwitchoverWaits {
		t.Fatalf("with analytics-1 unready: Job %v, condition %s; want no Job, %s", got.Job, got.Condition, reasonSwitchoverWaits)
	}

	cluster = append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, true, true, true)...)
	rsp = runTestIn(t, req, cluster)
	got := failoverStateOf(t, rsp)
	if !got.Job || got.JobFrom != "0" || got.Condition != "STATUS_CONDITION_TRUE/InProgress" {
		t.Fatalf("switchover Job: %+v", got)
	}
	job := decodeInto[batchv1.Job](t, rsp.GetDesired().GetResources()[string(rnFailover)].GetResource())
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["MODE"] != "switchover" || env["TARGET_ORDINAL"] != "1" {
		t.Errorf("switchover Job env MODE=%q TARGET_ORDINAL=%q", env["MODE"], env["TARGET_ORDINAL"])
	}

	feedBack(t, req, rsp, true)
	rsp = runTestIn(t, req, append(cluster, failoverJobPod(t, req, `{"result":"promoted","from":0,"to":1,"timeline":2,"lsn":"0/6000000","reason":"Switchover"}`)))
	want := failoverState{Job: true, JobFrom: "0", Primary: "1", Selector: "analytics-1", Status: "analytics-1", Count: 1, LastTo: "analytics-1", Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3, Requires: []string{requirementFailoverPods}}
	if d := cmp.Diff(want, failoverStateOf(t, rsp)); d != "" {
		t.Errorf("after the switchover (-want +got):\n%s", d)
	}
	if r := stringAt(rsp.GetDesired().GetComposite().GetResource(), "status", "failover", "last", "reason"); r != reasonSwitchover {
		t.Errorf("status.failover.last.reason %q, want %s", r, reasonSwitchover)
	}
	// Recorded: the Job goes and nothing else is asked for.
	feedBack(t, req, rsp, true)
	rsp = runTestIn(t, req, cluster)
	if got := failoverStateOf(t, rsp); got.Job || got.Primary != "1" {
		t.Errorf("once recorded: Job %v, primary %s; want no Job, primary 1", got.Job, got.Primary)
	}
}

// largeSteady is the large example (analytics, 3 instances) running and
// fed back: the request of the next reconcile.
func largeSteady(t *testing.T) *fnv1.RunFunctionRequest {
	t.Helper()
	req := xrRequest(readYAMLStruct(t, "example/xrs/large.yaml"), compositionInput(t, "example/composition.yaml"))
	rsp := runTest(t, req)
	for range 2 {
		feedBack(t, req, rsp, true)
		rsp = runTest(t, req)
	}
	feedBack(t, req, rsp, true)
	return req
}

// setObservedPrimary sets key primary of the observed scripts ConfigMap.
func setObservedPrimary(req *fnv1.RunFunctionRequest, v string) {
	structAt(req.Observed.Resources[string(rnScripts)].GetResource(), "data").Fields[keyPrimary] = structpb.NewStringValue(v)
}

// setSpecField sets one field of the observed XR's spec.
func setSpecField(req *fnv1.RunFunctionRequest, k string, v *structpb.Value) {
	req.Observed.Composite.Resource.GetFields()["spec"].GetStructValue().Fields[k] = v
}

// setFailoverRecord sets the observed XR's status.failover.
func setFailoverRecord(t *testing.T, req *fnv1.RunFunctionRequest, y string) {
	t.Helper()
	xr := req.Observed.Composite.Resource
	if structAt(xr, "status") == nil {
		xr.Fields["status"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{}})
	}
	structAt(xr, "status").Fields["failover"] = structpb.NewStructValue(yamlStruct(t, y))
}

// jobEnv is the env of the desired failover Job, or nil without one.
func jobEnv(t *testing.T, rsp *fnv1.RunFunctionResponse) []corev1.EnvVar {
	t.Helper()
	j := rsp.GetDesired().GetResources()[string(rnFailover)].GetResource()
	if j == nil {
		return nil
	}
	return decodeInto[batchv1.Job](t, j).Spec.Template.Spec.Containers[0].Env
}

// failoverEnv is the env failoverJob writes for analytics: the fixed part,
// then the facts, then the switchover's.
func failoverEnv(from, durability, lastTimeline, qualified string, extra ...corev1.EnvVar) []corev1.EnvVar {
	return append([]corev1.EnvVar{
		{Name: "DATABASE", Value: "analytics"},
		{Name: "PRIMARY_ORDINAL", Value: from},
		{Name: "INSTANCES", Value: "3"},
		{Name: "PEER_DOMAIN", Value: "analytics-hl.data.svc.cluster.local"},
		{Name: "PGPORT", Value: "5432"},
		{Name: "ADMIN_SECRET_DIR", Value: "/etc/database/superuser"},
		{Name: "GRACE_SECONDS", Value: "10"},
		{Name: "STARTING_MAX_SECONDS", Value: "120"},
		{Name: scripts.EnvFenceSeconds, Value: strconv.FormatInt(desiredFence(), 10)},
		{Name: scripts.EnvDurability, Value: durability},
		{Name: scripts.EnvLastTimeline, Value: lastTimeline},
		{Name: scripts.EnvQualifiedOrdinals, Value: qualified},
	}, extra...)
}

// TestFenceSeconds: the fence is read from the lost primary's own liveness
// probe, Kubernetes' defaults filling what it leaves unset, and the pod's
// grace when the probe has none.
func TestFenceSeconds(t *testing.T) {
	if got, want := desiredFence(), int64(livenessPeriod*livenessFailures+livenessTimeout+livenessKillGrace+fenceMargin); got != want {
		t.Errorf("desiredFence() = %d, want %d", got, want)
	}
	cases := map[string]struct {
		pod    string
		want   int64
		wantOK bool
	}{
		"Composed": {pod: `{spec: {terminationGracePeriodSeconds: 60, containers: [{name: postgres, livenessProbe: {periodSeconds: 4, failureThreshold: 3, timeoutSeconds: 4, terminationGracePeriodSeconds: 2}}]}}`,
			want: desiredFence(), wantOK: true},
		// The probe of the templates before the fence: SIGTERM stays
		// pending on a frozen postmaster, SIGKILL comes after the pod's
		// 60 s grace.
		"OlderTemplate": {pod: `{spec: {terminationGracePeriodSeconds: 60, containers: [{name: password-sync}, {name: postgres, livenessProbe: {periodSeconds: 15, failureThreshold: 6, timeoutSeconds: 5}}]}}`,
			want: 15*6 + 5 + 60 + fenceMargin, wantOK: true},
		"Defaults":   {pod: `{spec: {containers: [{name: postgres, livenessProbe: {exec: {command: [true]}}}]}}`, want: 10*3 + 1 + 30 + fenceMargin, wantOK: true},
		"NoProbe":    {pod: `{spec: {containers: [{name: postgres}]}}`},
		"NoPostgres": {pod: `{spec: {containers: [{name: other, livenessProbe: {periodSeconds: 1}}]}}`},
		"NoSpec":     {pod: `{metadata: {name: x}}`},
		"NegativeIgnored": {pod: `{spec: {containers: [{name: postgres, livenessProbe: {periodSeconds: -4, failureThreshold: 3, timeoutSeconds: 4, terminationGracePeriodSeconds: 2}}]}}`,
			want: 10*3 + 4 + 2 + fenceMargin, wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := podFence(yamlStruct(t, tc.pod))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("podFence() = %d, %v, want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// withEnv is env with the value of name replaced.
func withEnv(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	out := slices.Clone(env)
	for i := range out {
		if out[i].Name == name {
			out[i].Value = value
		}
	}
	return out
}

// TestFailoverJobFacts: a failover or switchover Job is told the durability,
// the last recorded timeline (1 when none is) and the standbys whose pods
// were ready, ascending, without the lost primary: the only ones it may
// promote.
func TestFailoverJobFacts(t *testing.T) {
	last3 := `{count: 1, last: {from: analytics-0, to: analytics-2, reason: PrimaryLost, time: "2026-11-28T02:41:07Z", timeline: 3, lsn: 0/9000060}}`
	cases := map[string]struct {
		reason  string
		spec    map[string]*structpb.Value // fields set in large.yaml's spec
		primary string                     // the observed ConfigMap's key primary, when set
		record  string                     // status.failover, when set
		ready   []bool
		// primaryPod, when set, is the spec of analytics-0's pod (YAML).
		primaryPod string
		want       []corev1.EnvVar
	}{
		"BothStandbysReady": {reason: "every standby ready", ready: []bool{false, true, true},
			want: failoverEnv("0", "async", "1", "1 2")},
		"OneStandbyReady": {reason: "an unready standby is not fit to promote", ready: []bool{false, false, true},
			want: failoverEnv("0", "async", "1", "2")},
		"NoStandbyReady": {reason: "none ready: an empty list", ready: []bool{false, false, false},
			want: failoverEnv("0", "async", "1", "")},
		"Sync": {reason: "spec.durability as resolved", spec: map[string]*structpb.Value{"durability": structpb.NewStringValue("sync")}, ready: []bool{false, true, false},
			want: failoverEnv("0", "sync", "1", "1")},
		"AfterAFailover": {reason: "the last recorded timeline; the lost primary 2 is not a candidate, 0 is", primary: "2", record: last3, ready: []bool{true, true, false},
			want: failoverEnv("2", "async", "3", "0 1")},
		"OlderProbe": {reason: "the lost primary's pod runs an older template's liveness probe: its bound is the fence", ready: []bool{false, true, true},
			primaryPod: `{spec: {terminationGracePeriodSeconds: 60, containers: [{name: postgres, livenessProbe: {periodSeconds: 15, failureThreshold: 6, timeoutSeconds: 5}}]}}`,
			want:       withEnv(failoverEnv("0", "async", "1", "1 2"), scripts.EnvFenceSeconds, "158")},
		"Switchover": {reason: "the same facts for a switchover (every instance ready)", spec: map[string]*structpb.Value{"primary": structpb.NewNumberValue(1)}, ready: []bool{true, true, true},
			want: failoverEnv("0", "async", "1", "1 2", corev1.EnvVar{Name: "MODE", Value: "switchover"}, corev1.EnvVar{Name: "TARGET_ORDINAL", Value: "1"})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			for k, v := range tc.spec {
				setSpecField(req, k, v)
			}
			if tc.primary != "" {
				setObservedPrimary(req, tc.primary)
			}
			if tc.record != "" {
				setFailoverRecord(t, req, tc.record)
			}
			pods := instancePodsReady(t, tc.ready...)
			if tc.primaryPod != "" {
				pods[0].Fields["spec"] = structpb.NewStructValue(structAt(yamlStruct(t, tc.primaryPod), "spec"))
			}
			rsp := runTestIn(t, req, append(append([]*structpb.Struct{}, exampleCluster(t)...), pods...))
			if d := cmp.Diff(tc.want, jobEnv(t, rsp)); d != "" {
				t.Errorf("%s: the Job's env (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestFailoverJobFactsFrozen: the facts are those of the Job's composition.
// A standby's readiness or the durability changing while the Job runs
// changes nothing of the Job (its pod template is immutable), and a Job
// composed before the facts existed is kept without them.
func TestFailoverJobFactsFrozen(t *testing.T) {
	cases := map[string]struct {
		reason string
		strip  bool // the observed Job lacks the facts (an older function composed it)
		want   []corev1.EnvVar
	}{
		"Composed": {reason: "kept as composed", want: failoverEnv("0", "async", "1", "1 2")},
		"OlderJob": {reason: "kept without them", strip: true, want: failoverEnv("0", "async", "1", "1 2")[:8]},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			rsp := runTestIn(t, req, append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, false, true, true)...))
			feedBack(t, req, rsp, false) // the Job runs
			job := req.Observed.Resources[string(rnFailover)].GetResource()
			if job == nil {
				t.Fatal("no failover Job composed")
			}
			if tc.strip {
				c := structAt(job, "spec", "template", "spec").GetFields()["containers"].GetListValue().GetValues()[0].GetStructValue()
				env := c.GetFields()["env"].GetListValue()
				env.Values = env.Values[:8]
			}
			// Since then: a standby turned unready, the durability changed.
			setSpecField(req, "durability", structpb.NewStringValue("sync"))
			rsp = runTestIn(t, req, append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, false, false, true)...))
			if d := cmp.Diff(tc.want, jobEnv(t, rsp)); d != "" {
				t.Errorf("%s: the running Job's env (-want +got):\n%s", tc.reason, d)
			}
			if got := failoverStateOf(t, rsp); got.Condition != "STATUS_CONDITION_TRUE/InProgress" {
				t.Errorf("condition %s, want the Job running", got.Condition)
			}
		})
	}
}

// warningsOf are the reasons of a response's Warning results.
func warningsOf(rsp *fnv1.RunFunctionResponse) []string {
	var out []string
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING {
			out = append(out, r.GetReason())
		}
	}
	return out
}

// TestFailoverOutcomeOldTimeline: a Job that reports a promotion on a
// timeline not above the last recorded failover's found a former primary
// answering, not a promotion of its own: the primary is not moved, the
// Failover condition and a Warning say so, and the run is recorded so that
// the Job is dropped and a new one starts while the primary is not ready.
func TestFailoverOutcomeOldTimeline(t *testing.T) {
	// analytics-0 failed over to analytics-1 on timeline 3; now 1 is lost.
	const record = `{count: 1, last: {from: analytics-0, to: analytics-1, reason: PrimaryLost, time: "2026-11-28T02:41:07Z", timeline: 3, lsn: 0/9000060}}`
	moved := failoverState{Job: true, JobFrom: "1", Primary: "2", Selector: "analytics-2", Status: "analytics-2", Count: 2, LastTo: "analytics-2",
		Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3, Requires: []string{requirementFailoverPods, requirementInstances}}
	refused := failoverState{Job: true, JobFrom: "1", Primary: "1", Selector: "analytics-1", Status: "analytics-1", Count: 2, LastTo: "analytics-1",
		Condition: "STATUS_CONDITION_FALSE/" + reasonOldTimeline, Replicas: 3, Requires: []string{requirementFailoverPods, requirementInstances}}
	cases := map[string]struct {
		reason string
		record bool
		// lost: status.failover is lost while the Job runs (a status
		// wipe); the Job's LAST_TIMELINE still knows timeline 3.
		lost     bool
		outcome  string
		want     failoverState
		warnings []string
		says     []string // the Failover condition's message says these
	}{
		"Older": {reason: "a former primary on timeline 2", record: true,
			outcome: `{"result":"promoted","from":1,"to":0,"timeline":2,"lsn":"0/7000000","reason":"PrimaryLost"}`,
			want:    refused, warnings: []string{reasonOldTimeline},
			says: []string{"analytics-failover", "analytics-0 promoted on timeline 2", "not above timeline 3", "status.failover.last.timeline", "the primary stays analytics-1", "a new one promotes a standby", "bring analytics-1 back"}},
		"Same": {reason: "the lost primary's own timeline is not a promotion", record: true,
			outcome: `{"result":"promoted","from":1,"to":2,"timeline":3,"lsn":"0/9000100","reason":"PrimaryLost"}`,
			want:    refused, warnings: []string{reasonOldTimeline},
			says: []string{"analytics-2 promoted on timeline 3", "not above timeline 3"}},
		"Newer": {reason: "a promotion onto timeline 4 moves the primary", record: true,
			outcome: `{"result":"promoted","from":1,"to":2,"timeline":4,"lsn":"0/9000100","reason":"PrimaryLost"}`,
			want:    moved},
		"NoRecordTimelineOne": {reason: "nothing recorded: initdb's timeline 1 is no promotion either",
			outcome: `{"result":"promoted","from":1,"to":2,"timeline":1,"lsn":"0/3000000","reason":"PrimaryLost"}`,
			want: func() failoverState {
				s := refused
				s.Count, s.LastTo = 1, ""
				return s
			}(), warnings: []string{reasonOldTimeline}, says: []string{"not above timeline 1"}},
		"StatusLostWhileRunning": {reason: "the Job was told timeline 3; the record is gone", record: true, lost: true,
			outcome: `{"result":"promoted","from":1,"to":0,"timeline":2,"lsn":"0/7000000","reason":"PrimaryLost"}`,
			want: func() failoverState {
				s := refused
				s.LastTo = ""
				return s
			}(), warnings: []string{reasonOldTimeline}, says: []string{"analytics-0 promoted on timeline 2", "not above timeline 3"}},
		"NoRecordPromoted": {reason: "nothing recorded: timeline 2 is a promotion",
			outcome: `{"result":"promoted","from":1,"to":2,"timeline":2,"lsn":"0/5000000","reason":"PrimaryLost"}`,
			want: func() failoverState {
				s := moved
				s.Count = 1
				return s
			}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			setObservedPrimary(req, "1")
			if tc.record {
				setFailoverRecord(t, req, record)
			}
			cluster := append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, true, false, true)...)
			rsp := runTestIn(t, req, cluster)
			if got := failoverStateOf(t, rsp); !got.Job || got.JobFrom != "1" {
				t.Fatalf("no failover Job of analytics-1: %+v", got)
			}
			feedBack(t, req, rsp, true) // the Job completed
			if tc.lost {
				delete(structAt(req.Observed.Composite.Resource, "status").Fields, "failover")
			}
			rsp = runTestIn(t, req, append(cluster, failoverJobPod(t, req, tc.outcome)))
			if d := cmp.Diff(tc.want, failoverStateOf(t, rsp)); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
			if d := cmp.Diff(tc.warnings, warningsOf(rsp), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("%s: Warnings (-want +got):\n%s", tc.reason, d)
			}
			msg := conditionOf(rsp, condFailover).GetMessage()
			for _, s := range tc.says {
				if !strings.Contains(msg, s) {
					t.Errorf("%s: the Failover condition does not say %q: %s", tc.reason, s, msg)
				}
			}
			if len(tc.warnings) == 0 {
				return
			}
			if rs := rsp.GetResults(); len(rs) != 1 || rs[0].GetMessage() != msg {
				t.Fatalf("want one Warning saying what the condition says (%q), got %v", msg, rs)
			}

			// The same outcome again, the condition on the XR: no second
			// Warning.
			writeConditions(t, req.Observed.Composite.Resource, rsp)
			again := runTestIn(t, req, append(cluster, failoverJobPod(t, req, tc.outcome)))
			if w := warningsOf(again); len(w) != 0 {
				t.Errorf("warned again once the condition says it: %v", w)
			}
			if d := cmp.Diff(desiredOf(rsp), desiredOf(again), protocmp.Transform()); d != "" {
				t.Errorf("the desired state changed (-first +again):\n%s", d)
			}

			// Recorded and read back: the Job is dropped, the primary is
			// still analytics-1.
			feedBack(t, req, rsp, true)
			rsp = runTestIn(t, req, cluster)
			got := failoverStateOf(t, rsp)
			if got.Job || got.Primary != "1" || got.Selector != "analytics-1" {
				t.Errorf("once recorded: Job %v, primary %s, selector %s; want the Job dropped, analytics-1 still the primary", got.Job, got.Primary, got.Selector)
			}
			// analytics-1 still not ready: a new Job, told the last recorded
			// timeline (a lost record forgot it), with the next count.
			feedBack(t, req, rsp, true)
			rsp = runTestIn(t, req, cluster)
			wantTL := map[bool]string{true: "3", false: "1"}[tc.record && !tc.lost]
			if d := cmp.Diff(failoverEnv("1", "async", wantTL, "0 2"), jobEnv(t, rsp)); d != "" {
				t.Errorf("the next Job's env (-want +got):\n%s", d)
			}
			job := decodeInto[batchv1.Job](t, rsp.GetDesired().GetResources()[string(rnFailover)].GetResource())
			if c, want := job.Annotations[annotationFailoverCount], fmt.Sprint(tc.want.Count); c != want {
				t.Errorf("the next Job's count %s, want %s", c, want)
			}
		})
	}
}

// TestPrimaryOrdinalRead: a primary read back (the ConfigMap's key, else
// status.failover.last.to) that names no instance is ignored as if absent,
// with a Warning naming the field: it never sizes the StatefulSet (a key 7
// scaled a medium Database to 8 instances) nor becomes the primary.
func TestPrimaryOrdinalRead(t *testing.T) {
	type want struct {
		Primary, Selector, Status string
		Replicas                  int32
		Warnings                  []string
		Applied                   string // the SpecApplied condition's reason
	}
	ok := func(k string, replicas int32) want {
		return want{k, "orders-" + k, "orders-" + k, replicas, nil, "Applied"}
	}
	ignored := func(k string, replicas int32) want {
		w := ok(k, replicas)
		w.Warnings = []string{reasonPrimaryInvalid}
		return w
	}
	cases := map[string]struct {
		reason  string
		size    string // the spec's size after running as large; medium when empty
		primary string // key primary of the observed ConfigMap; "-" removes it, "--" removes the ConfigMap
		record  string // status.failover.last.to
		want    want
		says    []string // the Warning says these
	}{
		"Valid": {reason: "an instance's ordinal", primary: "1", want: ok("1", 2)},
		"NoKey": {reason: "a Database composed before failover: 0, no warning", primary: "-", want: ok("0", 2)},
		"BeyondMedium": {reason: "key 7 on a medium Database: not 8 instances", primary: "7", want: ignored("0", 2),
			says: []string{`key primary of ConfigMap orders-scripts is "7"`, "no instance of the 2 (orders-0 to orders-1)", "the primary is taken to be orders-0", "do not edit it"}},
		"AtCount":    {reason: "2 is not below 2", primary: "2", want: ignored("0", 2)},
		"Negative":   {reason: "a negative ordinal", primary: "-1", want: ignored("0", 2)},
		"NotANumber": {reason: "not a number", primary: "one", want: ignored("0", 2)},
		"Empty":      {reason: "an empty value", primary: "", want: ignored("0", 2)},
		"StatusValid": {reason: "the key ignored, status.failover.last.to names an instance", primary: "7", record: "orders-1", want: ignored("1", 2),
			says: []string{`key primary of ConfigMap orders-scripts is "7"`, "the primary is taken to be orders-1 (status.failover.last.to)"}},
		"StatusBeyond": {reason: "no ConfigMap, status.failover.last.to beyond the instances", primary: "--", record: "orders-7", want: ignored("0", 2),
			says: []string{`status.failover.last.to is "orders-7"`, "nothing valid recorded"}},
		"StatusOther": {reason: "status.failover.last.to names another Database's pod", primary: "--", record: "payments-1", want: ignored("0", 2),
			says: []string{`status.failover.last.to is "payments-1"`}},
		"BothBeyond": {reason: "both ignored, both named", primary: "8", record: "orders-8", want: ignored("0", 2),
			says: []string{`ConfigMap orders-scripts is "8"`, `status.failover.last.to is "orders-8"`}},
		"KeyOverStatus": {reason: "a valid key wins over the record, which is not read", primary: "1", record: "orders-9", want: ok("1", 2)},
		// Running as large (3 instances), the size asks for medium (2).
		"ScaleInBelowPrimary": {reason: "a real primary 2 above the new size keeps 3 instances", size: "large", primary: "2",
			want: want{"2", "orders-2", "orders-2", 3, []string{reasonScaleInBlocked}, reasonScaleInBlocked}},
		"ScaleInBeyondBoth": {reason: "key 7 above both the StatefulSet's 3 and medium's 2: scaled in to 2", size: "large", primary: "7",
			want: want{"0", "orders-0", "orders-0", 2, []string{reasonPrimaryInvalid}, "Applied"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			xr := validXR
			if tc.size != "" {
				xr = strings.Replace(validXR, "size: medium", "size: "+tc.size, 1)
			}
			req := runningRequest(t, xr)
			setSpec(t, req, `{version: "16", size: medium}`)
			switch tc.primary {
			case "--":
				delete(req.Observed.Resources, string(rnScripts))
			case "-":
				delete(structAt(req.Observed.Resources[string(rnScripts)].GetResource(), "data").Fields, keyPrimary)
			default:
				setObservedPrimary(req, tc.primary)
			}
			if tc.record != "" {
				setFailoverRecord(t, req, fmt.Sprintf(`{count: 1, last: {from: orders-0, to: %s, reason: PrimaryLost, timeline: 2}}`, tc.record))
			}
			// Every instance ready: no failover starts.
			rsp := runTestIn(t, req, append(append([]*structpb.Struct{}, exampleCluster(t)...), podsReady(t, "orders", "shop", 9)...))
			rs := rsp.GetDesired().GetResources()
			cm := decodeInto[corev1.ConfigMap](t, rs[string(rnScripts)].GetResource())
			svc := decodeInto[corev1.Service](t, rs[string(rnService)].GetResource())
			got := want{
				Primary:  cm.Data[keyPrimary],
				Selector: svc.Spec.Selector[labelPodName],
				Status:   stringAt(rsp.GetDesired().GetComposite().GetResource(), "status", "primary"),
				Replicas: *desiredSTS(t, rsp).Spec.Replicas,
				Warnings: warningsOf(rsp),
				Applied:  conditionOf(rsp, condSpecApplied).GetReason(),
			}
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
			var warning string
			for _, r := range rsp.GetResults() {
				if r.GetReason() == reasonPrimaryInvalid {
					warning = r.GetMessage()
				}
			}
			for _, s := range tc.says {
				if !strings.Contains(warning, s) {
					t.Errorf("%s: the Warning does not say %q: %s", tc.reason, s, warning)
				}
			}
			if warning != "" && !strings.Contains(conditionOf(rsp, condFailover).GetMessage(), warning) {
				t.Errorf("the Failover condition does not say the Warning: %s", conditionOf(rsp, condFailover).GetMessage())
			}
		})
	}
}

// podsReady are n ready instance pods of Database name in ns.
func podsReady(t *testing.T, name, ns string, n int) []*structpb.Struct {
	t.Helper()
	var out []*structpb.Struct
	for k := range n {
		out = append(out, yamlStruct(t, fmt.Sprintf(`{apiVersion: v1, kind: Pod, metadata: {name: %s-%d, namespace: %s, labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: %s, app.kubernetes.io/component: database}}, status: {conditions: [{type: Ready, status: "True"}]}}`, name, k, ns, name)))
	}
	return out
}

// TestFailoverHeld: the Job's run held instead of promoting (durability
// sync with a standby silent, or no standby qualified). While the Job
// retries and once it has failed, the Failover condition says Held with
// the Job's reason, and the primary does not move.
func TestFailoverHeld(t *testing.T) {
	const why = "1 standby(s) did not answer in 15 rounds; with durability sync any of them may hold the last acknowledged commits"
	held := fmt.Sprintf(`{"result":"held","from":0,"reason":%q}`, why)
	for name, status := range map[string]*batchv1.JobStatus{
		"Retrying": {Active: 1, Failed: 1},
		"Failed":   jobFailedWith("BackoffLimitExceeded", "Job has reached the specified backoff limit"),
	} {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			cluster := append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, false, true, true)...)
			rsp := runTestIn(t, req, cluster)
			if got := failoverStateOf(t, rsp); !got.Job || got.JobFrom != "0" {
				t.Fatalf("no failover Job of analytics-0: %+v", got)
			}
			feedBack(t, req, rsp, true)
			j := decodeInto[batchv1.Job](t, req.Observed.Resources[string(rnFailover)].GetResource())
			j.Status = *status
			req.Observed.Resources[string(rnFailover)] = encodeObserved(t, j)
			pod := failoverJobPod(t, req, held)
			rsp = runTestIn(t, req, append(cluster, pod))
			c := conditionOf(rsp, condFailover)
			if c.GetReason() != reasonFailoverHeld || c.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE {
				t.Errorf("Failover condition %s/%s, want False/%s: %s", c.GetStatus(), c.GetReason(), reasonFailoverHeld, c.GetMessage())
			}
			for _, s := range []string{"analytics-0 is lost", "analytics-failover holds", why} {
				if !strings.Contains(c.GetMessage(), s) {
					t.Errorf("the condition does not say %q: %s", s, c.GetMessage())
				}
			}
			if got := failoverStateOf(t, rsp); got.Primary != "0" || got.Selector != "analytics-0" {
				t.Errorf("primary %s, selector %s: a held Job moved the primary", got.Primary, got.Selector)
			}
		})
	}
}

// TestInstancesAskedOnlyWhenNeeded: the instance pods are required (a
// second call of the reconcile) only when they can change the decision.
// The StatefulSet's status is what settles it: every instance counted ready
// there means no failover to start, so a healthy Database is one call; the
// moment the status lags a pod that just turned unready, the pods are not
// read either, and the next reconcile (the status change wakes it) is the
// one that fails over.
func TestInstancesAskedOnlyWhenNeeded(t *testing.T) {
	newReq := func() *fnv1.RunFunctionRequest {
		return xrRequest(readYAMLStruct(t, "example/xrs/large.yaml"), compositionInput(t, "example/composition.yaml"))
	}
	setReady := func(req *fnv1.RunFunctionRequest, n int) {
		structAt(req.Observed.Resources[string(rnStatefulSet)].GetResource(), "status").Fields["readyReplicas"] = structpb.NewNumberValue(float64(n))
	}
	cases := map[string]struct {
		req  func() *fnv1.RunFunctionRequest
		want []string // the requirements of the first call
		job  bool     // a failover Job in the end (all calls)
	}{
		"NoStatefulSetYet": {req: newReq},
		"EveryInstanceReady": {req: func() *fnv1.RunFunctionRequest {
			return largeSteady(t)
		}},
		"StatusCountsOneUnready": {req: func() *fnv1.RunFunctionRequest {
			req := largeSteady(t)
			setReady(req, 2)
			return req
		}, want: []string{requirementInstances}, job: true},
		"SwitchoverAsked": {req: func() *fnv1.RunFunctionRequest {
			req := largeSteady(t)
			setSpecField(req, "primary", structpb.NewNumberValue(1))
			return req
		}, job: true},
		"SizeChangePending": {req: func() *fnv1.RunFunctionRequest {
			req := largeSteady(t)
			setSpecField(req, "size", structpb.NewStringValue("medium"))
			return req
		}, want: []string{requirementInstances}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := tc.req()
			first := runOnce(t, req)
			if d := cmp.Diff(tc.want, slices.Sorted(maps.Keys(first.GetRequirements().GetResources()))); d != "" {
				t.Errorf("the first call's requirements (-want +got):\n%s", d)
			}
			// The whole reconcile, the pods as the StatefulSet's status
			// counts them (the primary, analytics-0, the unready one).
			ready := structAt(req.Observed.Resources[string(rnStatefulSet)].GetResource(), "status").GetFields()["readyReplicas"].GetNumberValue()
			var pods []*structpb.Struct
			if req.Observed.Resources[string(rnStatefulSet)] != nil {
				pods = instancePodsReady(t, ready == 3, true, true)
			}
			rsp := runTestIn(t, req, append(append([]*structpb.Struct{}, exampleCluster(t)...), pods...))
			if got := rsp.GetDesired().GetResources()[string(rnFailover)] != nil; got != tc.job {
				t.Errorf("failover Job composed: %v, want %v", got, tc.job)
			}
		})
	}

	// The lag: the status still counts three ready while analytics-0 is
	// not. Nothing is asked and nothing starts on this reconcile.
	req := largeSteady(t)
	rsp := runOnce(t, req)
	if rsp.GetRequirements() != nil || rsp.GetDesired().GetResources()[string(rnFailover)] != nil {
		t.Errorf("with the status counting every instance ready: requirements %v, failover Job %v; want neither", rsp.GetRequirements(), rsp.GetDesired().GetResources()[string(rnFailover)] != nil)
	}
}

// TestFailoverOutcomeFound: the ConfigMap's primary key edited to a
// standby's ordinal names the wrong instance; once it is not ready the Job
// finds it answering as a standby and the real primary on the last recorded
// timeline, and reports "found" instead of promoting a standby past a live
// primary. The function makes that primary the primary again, warns, and
// records it; a "found" on any other timeline names no such primary and is
// refused.
func TestFailoverOutcomeFound(t *testing.T) {
	for name, tc := range map[string]struct {
		outcome  string
		want     failoverState
		warnings []string
		lastWhy  string
	}{
		"LastTimeline": {
			outcome: `{"result":"found","from":1,"to":0,"timeline":1,"lsn":"0/3000100","reason":"ordinal 1 answers as a standby"}`,
			want: failoverState{Job: true, JobFrom: "1", Primary: "0", Selector: "analytics-0", Status: "analytics-0", Count: 1, LastTo: "analytics-0",
				Condition: "STATUS_CONDITION_FALSE/PrimaryReady", Replicas: 3, Requires: []string{requirementFailoverPods, requirementInstances}},
			warnings: []string{reasonPrimaryFound}, lastWhy: reasonPrimaryFound,
		},
		"OtherTimeline": {
			outcome: `{"result":"found","from":1,"to":0,"timeline":2,"lsn":"0/3000100","reason":"ordinal 1 answers as a standby"}`,
			want: failoverState{Job: true, JobFrom: "1", Primary: "1", Selector: "analytics-1", Status: "analytics-1", Count: 1,
				Condition: "STATUS_CONDITION_FALSE/" + reasonOldTimeline, Replicas: 3, Requires: []string{requirementFailoverPods, requirementInstances}},
			warnings: []string{reasonOldTimeline},
		},
	} {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			setObservedPrimary(req, "1") // the key edited: analytics-1 is a standby
			cluster := append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, true, false, true)...)
			rsp := runTestIn(t, req, cluster)
			if got := failoverStateOf(t, rsp); !got.Job || got.JobFrom != "1" {
				t.Fatalf("no failover Job of analytics-1: %+v", got)
			}
			feedBack(t, req, rsp, true) // the Job completed
			rsp = runTestIn(t, req, append(cluster, failoverJobPod(t, req, tc.outcome)))
			if d := cmp.Diff(tc.want, failoverStateOf(t, rsp)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.warnings, warningsOf(rsp), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("Warnings (-want +got):\n%s", d)
			}
			if tc.lastWhy == "" {
				return
			}
			if got := stringAt(structAt(rsp.GetDesired().GetComposite().GetResource(), "status", "failover", "last"), "reason"); got != tc.lastWhy {
				t.Errorf("status.failover.last.reason %q, want %s", got, tc.lastWhy)
			}
			for _, r := range rsp.GetResults() {
				if r.GetReason() == reasonPrimaryFound {
					for _, s := range []string{"analytics-1 answering as a standby", "analytics-0 as the primary on timeline 1", "nothing was promoted", "do not edit it"} {
						if !strings.Contains(r.GetMessage(), s) {
							t.Errorf("the Warning does not say %q: %s", s, r.GetMessage())
						}
					}
				}
			}
		})
	}
}

// instancePod is pod k of analytics on node, ready as given, and being
// deleted (a deletionTimestamp) when deleting.
func instancePod(t *testing.T, k int, ready bool, node string, deleting bool) *structpb.Struct {
	t.Helper()
	p := instancePodsReady(t, append(make([]bool, k), ready)...)[k]
	structAt(p, "metadata").Fields["name"] = structpb.NewStringValue(fmt.Sprintf("analytics-%d", k))
	p.Fields["spec"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"nodeName": structpb.NewStringValue(node)}})
	if deleting {
		structAt(p, "metadata").Fields["deletionTimestamp"] = structpb.NewStringValue("2026-12-03T15:00:00Z")
	}
	return p
}

// TestFailoverPrimaryStopping: the primary's pod being deleted while its
// postgres still serves (a drain; its preStop hook holds it) is switched
// over from, to a ready standby on another node; a pod being deleted on a
// lost node (not ready) is failed over from as before.
func TestFailoverPrimaryStopping(t *testing.T) {
	type pod struct {
		ready    bool
		node     string
		deleting bool
	}
	cases := map[string]struct {
		pods   []pod
		input  func(in *structpb.Struct)
		target string // the switchover Job's TARGET_ORDINAL; "" a failover Job
		job    bool
		cond   string
	}{
		"Drain": {
			pods:   []pod{{true, "a", true}, {true, "a", false}, {true, "b", false}},
			target: "2", job: true, cond: "STATUS_CONDITION_TRUE/InProgress",
		},
		"DrainStandbysOnTheSameNode": {
			pods:   []pod{{true, "a", true}, {false, "b", false}, {true, "a", false}},
			target: "2", job: true, cond: "STATUS_CONDITION_TRUE/InProgress",
		},
		// Updates deferred (OnDelete): the StatefulSet's status still
		// tells a pod being deleted (currentReplicas).
		"DrainDeferred": {
			pods: []pod{{true, "a", true}, {true, "b", false}, {true, "c", false}},
			input: func(in *structpb.Struct) {
				in.Fields["updates"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"policy": structpb.NewStringValue("Deferred")}})
			},
			target: "1", job: true, cond: "STATUS_CONDITION_TRUE/InProgress",
		},
		"NodeLost": {
			pods: []pod{{false, "a", true}, {true, "b", false}, {true, "c", false}},
			job:  true, cond: "STATUS_CONDITION_TRUE/InProgress",
		},
		"NoReadyStandby": {
			pods: []pod{{true, "a", true}, {false, "b", false}, {false, "c", true}},
			job:  true, cond: "STATUS_CONDITION_TRUE/InProgress",
		},
		"FailoverOff": {
			pods: []pod{{true, "a", true}, {true, "b", false}, {true, "c", false}},
			input: func(in *structpb.Struct) {
				in.Fields["failover"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"enabled": structpb.NewBoolValue(false)}})
			},
			cond: "STATUS_CONDITION_FALSE/Disabled",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := proto.CloneOf(compositionInput(t, "example/composition.yaml"))
			if tc.input != nil {
				tc.input(in)
			}
			req := xrRequest(readYAMLStruct(t, "example/xrs/large.yaml"), in)
			rsp := runTest(t, req)
			for range 2 {
				feedBack(t, req, rsp, true)
				rsp = runTest(t, req)
			}
			feedBack(t, req, rsp, true)
			if cm := decodeInto[corev1.ConfigMap](t, rsp.GetDesired().GetResources()[string(rnScripts)].GetResource()); cm.Data[keySwitchoverOnStop] != strconv.FormatBool(name != "FailoverOff") {
				t.Errorf("ConfigMap key %s = %q with failover %v", keySwitchoverOnStop, cm.Data[keySwitchoverOnStop], name != "FailoverOff")
			}
			cluster := slices.Clone(exampleCluster(t))
			for k, p := range tc.pods {
				cluster = append(cluster, instancePod(t, k, p.ready, p.node, p.deleting))
			}
			// The StatefulSet controller counts a pod being deleted in
			// neither currentReplicas nor updatedReplicas.
			statusFromPods(req, cluster)
			st := structAt(req.Observed.Resources[string(rnStatefulSet)].GetResource(), "status")
			st.Fields["updatedReplicas"], st.Fields["currentReplicas"] = structpb.NewNumberValue(2), structpb.NewNumberValue(2)
			rsp = runTestIn(t, req, cluster)
			got := failoverStateOf(t, rsp)
			if got.Job != tc.job || got.Condition != tc.cond || (tc.job && got.JobFrom != "0") {
				t.Fatalf("Job %v from %q, condition %s; want Job %v from 0, %s (%s)", got.Job, got.JobFrom, got.Condition, tc.job, tc.cond, conditionOf(rsp, condFailover).GetMessage())
			}
			if !tc.job {
				return
			}
			job := decodeInto[batchv1.Job](t, rsp.GetDesired().GetResources()[string(rnFailover)].GetResource())
			env := map[string]string{}
			for _, e := range job.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if env[scripts.EnvTargetOrdinal] != tc.target || (tc.target != "") != (env[scripts.EnvMode] == scripts.ModeSwitchover) {
				t.Fatalf("Job MODE=%q TARGET_ORDINAL=%q, want target %q", env[scripts.EnvMode], env[scripts.EnvTargetOrdinal], tc.target)
			}
			if tc.target == "" {
				return
			}
			if msg := conditionOf(rsp, condFailover).GetMessage(); !strings.Contains(msg, "being deleted") {
				t.Errorf("Failover condition %q does not say why the switchover runs", msg)
			}
			// The switchover promoted the target: recorded as
			// PrimaryStopping, the primary moved.
			feedBack(t, req, rsp, true)
			rsp = runTestIn(t, req, append(cluster, failoverJobPod(t, req, fmt.Sprintf(`{"result":"promoted","from":0,"to":%s,"timeline":2,"lsn":"0/6000000","reason":"Switchover"}`, tc.target))))
			if got := failoverStateOf(t, rsp); got.Primary != tc.target || got.Selector != "analytics-"+tc.target {
				t.Errorf("after the switchover: primary %s, rw selector %s; want %s", got.Primary, got.Selector, tc.target)
			}
			if r := stringAt(rsp.GetDesired().GetComposite().GetResource(), "status", "failover", "last", "reason"); r != reasonPrimaryStopping {
				t.Errorf("status.failover.last.reason %q, want %s", r, reasonPrimaryStopping)
			}
		})
	}
}

// TestFailoverHoldsScaleIn: a smaller size while a failover Job runs across
// three instances keeps the three (the Job may promote ordinal 2, which the
// scale-in would delete with the writes acknowledged there) and says so;
// once the Job's outcome is recorded, the scale-in applies.
func TestFailoverHoldsScaleIn(t *testing.T) {
	cluster := func(extra ...*structpb.Struct) []*structpb.Struct {
		return append(append([]*structpb.Struct{}, exampleCluster(t)...), extra...)
	}
	req := largeSteady(t)
	rsp := runTestIn(t, req, cluster(instancePodsReady(t, false, true, true)...))
	feedBack(t, req, rsp, false) // the Job runs
	setSpecField(req, "size", structpb.NewStringValue("medium"))
	rsp = runTestIn(t, req, cluster(instancePodsReady(t, false, true, true)...))
	if got := failoverStateOf(t, rsp); got.Replicas != 3 || !got.Job {
		t.Errorf("while the Job runs: %d instances (Job composed: %v), want 3 and the Job", got.Replicas, got.Job)
	}
	if c := conditionOf(rsp, condSpecApplied); c.GetReason() != reasonScaleInWaits {
		t.Errorf("SpecApplied %s, want %s", c.GetReason(), reasonScaleInWaits)
	}
	if w := warningsOf(rsp); !slices.Contains(w, reasonScaleInWaits) {
		t.Errorf("Warnings %v, want %s", w, reasonScaleInWaits)
	}

	// The Job promoted ordinal 1 and ended; recorded, then read back.
	feedBack(t, req, rsp, true)
	done := cluster(append(instancePodsReady(t, false, true, true),
		failoverJobPod(t, req, `{"result":"promoted","from":0,"to":1,"timeline":2,"lsn":"0/5000060"}`))...)
	rsp = runTestIn(t, req, done)
	feedBack(t, req, rsp, true)
	rsp = runTestIn(t, req, cluster(instancePodsReady(t, true, true, true)...))
	got := failoverStateOf(t, rsp)
	if got.Replicas != 2 || got.Job || got.Primary != "1" {
		t.Errorf("after the Job's outcome was recorded: %d instances, Job %v, primary %s; want 2, none, 1", got.Replicas, got.Job, got.Primary)
	}
	if c := conditionOf(rsp, condSpecApplied); c.GetReason() == reasonScaleInWaits {
		t.Errorf("SpecApplied still %s once the Job's outcome is recorded", c.GetReason())
	}
}
