package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestStatusNotAlarming: states that are fine must not look like failures:
// a restore running on ready instances is Provisioning (it was Degraded), and
// backups turned off on purpose are not BackupHealthy=False.
func TestStatusNotAlarming(t *testing.T) {
	const restoring = `{version: "16", size: small, restoreFrom: {database: orders-old}}`
	type got struct {
		Phase         string
		BackupHealthy *fnv1.Condition
	}
	backupOff := &fnv1.Condition{Type: condBackupHealthy, Status: fnv1.Status_STATUS_CONDITION_TRUE, Reason: "BackupDisabled",
		Message: ptr.To("no backups are taken (spec.backup.enabled is false): nothing can fail; enable them to have backups"), Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum()}
	cases := map[string]struct {
		reason string
		spec   string
		job    *batchv1.JobStatus // the restore Job's observed status
		want   got
	}{
		"RestoreRunning":  {"a restore running on a ready StatefulSet", restoring, &batchv1.JobStatus{Active: 1}, got{phaseProvisioning, backupOff}},
		"RestoreDone":     {"a completed restore", restoring, &batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}, got{phaseRunning, backupOff}},
		"RestoreFailed":   {"a failed restore", restoring, &batchv1.JobStatus{Failed: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}, got{phaseFailed, backupOff}},
		"BackupsOff":      {"backups off on purpose: not applicable, not failing", `{version: "16", size: medium}`, nil, got{phaseRunning, backupOff}},
		"BackupsOffFalse": {"backups off, explicitly", `{version: "16", size: medium, backup: {enabled: false}}`, nil, got{phaseRunning, backupOff}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, validXR), nil)
			setSpec(t, req, tc.spec)
			req.Observed.Resources = observedFrom(t, runTest(t, req), true)
			if tc.job != nil {
				job := decodeInto[batchv1.Job](t, req.Observed.Resources[string(rnRestore)].GetResource())
				job.Status = *tc.job
				req.Observed.Resources[string(rnRestore)] = encodeObserved(t, job)
			}
			rsp := runTest(t, req)
			g := got{
				Phase:         rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["phase"].GetStringValue(),
				BackupHealthy: conditionOf(rsp, condBackupHealthy),
			}
			if d := cmp.Diff(tc.want, g, protocmp.Transform()); d != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestWritableCondition: with durability sync and no standby streaming,
// commits wait without bound while the primary stays ready: the Writable
// condition says so. Absent where it cannot know (async, a lost primary).
func TestWritableCondition(t *testing.T) {
	cases := map[string]struct {
		durability string
		ready      []bool // analytics-0 (the primary), -1, -2
		want       string // status/reason, "" for no condition
		says       []string
	}{
		"SyncStandbysStreaming": {durabilitySync, []bool{true, true, false}, "STATUS_CONDITION_TRUE/SynchronousStandby", []string{"analytics-1"}},
		"SyncNoStandby": {durabilitySync, []bool{true, false, false}, "STATUS_CONDITION_FALSE/NoSynchronousStandby",
			[]string{"analytics-1, analytics-2 not ready", "writes block"}},
		"SyncPrimaryLost": {durabilitySync, []bool{false, false, true}, "", nil},
		"Async":           {durabilityAsync, []bool{true, false, false}, "", nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			structAt(req.Observed.Composite.Resource, "spec").Fields["durability"] = structpb.NewStringValue(tc.durability)
			cluster := append(append([]*structpb.Struct{}, exampleCluster(t)...), instancePodsReady(t, tc.ready...)...)
			c := conditionOf(runTestIn(t, req, cluster), condWritable)
			got := ""
			if c != nil {
				got = c.GetStatus().String() + "/" + c.GetReason()
			}
			if got != tc.want {
				t.Fatalf("Writable %q, want %q (%s)", got, tc.want, c.GetMessage())
			}
			for _, s := range tc.says {
				if !strings.Contains(c.GetMessage(), s) {
					t.Errorf("the condition does not say %q: %s", s, c.GetMessage())
				}
			}
		})
	}
}

// TestScheduledCondition: an instance no node takes (spread Required with
// fewer nodes than instances) is a condition naming it, the scheduler's
// reason and the way out, never a silent Pending; placed instances say how
// they are spread.
func TestScheduledCondition(t *testing.T) {
	const why = "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
	unschedulable := yamlStruct(t, `
apiVersion: v1
kind: Pod
metadata:
  name: analytics-2
  namespace: data
  labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: analytics, app.kubernetes.io/component: database, statefulset.kubernetes.io/pod-name: analytics-2}
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable, message: "`+why+`"}]
`)
	cases := map[string]struct {
		spread string // the input's spread.nodes
		pods   []*structpb.Struct
		want   string // status/reason, "" for no condition
		says   []string
	}{
		"EveryInstanceOnItsNode": {"", nil, "STATUS_CONDITION_TRUE/OneNodeEach", []string{"a node of its own"}},
		"FewerNodesThanInstances": {"", append(instancePodsReady(t, true, true), unschedulable), "STATUS_CONDITION_FALSE/InstanceUnschedulable",
			[]string{"analytics-2 (" + why + ")", "3 instances", "spread.nodes: Preferred"}},
		"PreferredPlaced": {spreadPreferred, nil, "STATUS_CONDITION_TRUE/MayShareNodes", []string{"may share"}},
		"PreferredUnschedulable": {spreadPreferred, append(instancePodsReady(t, true, true), unschedulable), "STATUS_CONDITION_FALSE/InstanceUnschedulable",
			[]string{"analytics-2 (" + why + ")"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			if tc.spread != "" {
				structAt(req.Input).Fields["spread"] = structpb.NewStructValue(yamlStruct(t, "nodes: "+tc.spread))
			}
			cluster := append([]*structpb.Struct{}, exampleCluster(t)...)
			if tc.pods == nil {
				cluster = append(cluster, instancePodsOf(t, req)...)
			} else {
				cluster = append(cluster, tc.pods...)
			}
			c := conditionOf(runTestIn(t, req, cluster), condScheduled)
			got := ""
			if c != nil {
				got = c.GetStatus().String() + "/" + c.GetReason()
			}
			if got != tc.want {
				t.Fatalf("Scheduled %q, want %q (%s)", got, tc.want, c.GetMessage())
			}
			for _, s := range tc.says {
				if !strings.Contains(c.GetMessage(), s) {
					t.Errorf("the condition does not say %q: %s", s, c.GetMessage())
				}
			}
			if tc.spread == spreadPreferred && strings.Contains(c.GetMessage(), "spread.nodes: Preferred") {
				t.Errorf("advises Preferred when it is already: %s", c.GetMessage())
			}
		})
	}
	t.Run("OneInstance", func(t *testing.T) {
		req := xrRequest(yamlStruct(t, validXR), nil)
		setSpec(t, req, `{version: "16", size: small}`)
		if c := conditionOf(runTest(t, req), condScheduled); c != nil {
			t.Errorf("Scheduled for one instance: %v", c)
		}
	})
}

// TestInstancesCondition: Instances names each instance that is not ready,
// its node, whether it is the primary, and why, in the words the pod gives.
func TestInstancesCondition(t *testing.T) {
	pod := func(k int, extra string) *structpb.Struct {
		name := fmt.Sprintf("analytics-%d", k)
		deleted := ""
		if strings.HasPrefix(extra, "deleted\n") {
			extra, deleted = strings.TrimPrefix(extra, "deleted\n"), "\n  deletionTimestamp: \"2026-12-03T10:00:00Z\""
		}
		return yamlStruct(t, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: data
  labels: {app.kubernetes.io/name: postgresql, app.kubernetes.io/instance: analytics, app.kubernetes.io/component: database, statefulset.kubernetes.io/pod-name: %s}%s
%s`, name, name, deleted, extra))
	}
	ready := func(k int) *structpb.Struct {
		return pod(k, fmt.Sprintf(`spec: {nodeName: node-%d}
status: {conditions: [{type: Ready, status: "True"}]}`, k))
	}
	cases := map[string]struct {
		pods []*structpb.Struct
		want string // status/reason
		says []string
	}{
		"AllReady": {nil, "STATUS_CONDITION_TRUE/AllReady", []string{"all 3 instances are ready"}},
		"StandbyNotReady": {[]*structpb.Struct{ready(0), ready(1), pod(2, `spec: {nodeName: node-2}
status: {conditions: [{type: Ready, status: "False", reason: ContainersNotReady, message: "containers with unready status: [postgres]"}]}`)},
			"STATUS_CONDITION_FALSE/InstancesNotReady", []string{"2 of 3 instances ready", "analytics-2 on node node-2: containers with unready status: [postgres]"}},
		"PrimaryOnALostNode": {[]*structpb.Struct{pod(0, `deleted
spec: {nodeName: node-0}
status: {conditions: [{type: Ready, status: "False"}]}`), ready(1), ready(2)},
			"STATUS_CONDITION_FALSE/InstancesNotReady", []string{"analytics-0 (the primary) on node node-0: being deleted (Terminating)"}},
		"CrashLooping": {[]*structpb.Struct{ready(0), pod(1, `spec: {nodeName: node-1}
status:
  conditions: [{type: Ready, status: "False", reason: ContainersNotReady}]
  containerStatuses: [{name: postgres, state: {waiting: {reason: CrashLoopBackOff}}}]`), ready(2)},
			"STATUS_CONDITION_FALSE/InstancesNotReady", []string{"analytics-1 on node node-1: postgres is in CrashLoopBackOff"}},
		"OnNoNode": {[]*structpb.Struct{ready(0), ready(1), pod(2, `status: {conditions: [{type: PodScheduled, status: "False", reason: Unschedulable, message: "0/2 nodes are available"}]}`)},
			"STATUS_CONDITION_FALSE/InstancesNotReady", []string{"analytics-2: on no node (condition Scheduled)"}},
		"NoPodYet": {[]*structpb.Struct{ready(0), ready(1)},
			"STATUS_CONDITION_FALSE/InstancesNotReady", []string{"analytics-2: not ready"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := largeSteady(t)
			cluster := append([]*structpb.Struct{}, exampleCluster(t)...)
			if tc.pods == nil {
				cluster = append(cluster, instancePodsOf(t, req)...)
			} else {
				cluster = append(cluster, tc.pods...)
			}
			c := conditionOf(runTestIn(t, req, cluster), condInstances)
			if c == nil {
				t.Fatal("no Instances condition")
			}
			if got := c.GetStatus().String() + "/" + c.GetReason(); got != tc.want {
				t.Fatalf("Instances %q, want %q (%s)", got, tc.want, c.GetMessage())
			}
			for _, s := range tc.says {
				if !strings.Contains(c.GetMessage(), s) {
					t.Errorf("the condition does not say %q: %s", s, c.GetMessage())
				}
			}
		})
	}
	t.Run("OneInstance", func(t *testing.T) {
		req := xrRequest(yamlStruct(t, validXR), nil)
		setSpec(t, req, `{version: "16", size: small}`)
		if c := conditionOf(runTest(t, req), condInstances); c != nil {
			t.Errorf("Instances for one instance: %v", c)
		}
	})
}
