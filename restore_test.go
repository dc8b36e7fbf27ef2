package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// restoringXR restores orders (example/xr.yaml, in exampleCluster) into a
// new Database on PostgreSQL 17.
const restoringXR = `
apiVersion: example.com/v1
kind: Database
metadata: {name: orders-v17, namespace: shop}
spec: {version: "17", size: small, restoreFrom: {database: orders}}
`

// restoreOutcome is what a response says about the restore.
type restoreOutcome struct {
	Job         bool
	Backup      string // the Job's RESTORE_BACKUP
	Image       string
	Attempt     string
	Beside      bool   // required pod affinity to the source's primary
	Restored    string // status/reason of the Restored condition
	SpecApplied string // reason
	Phase       string
	Record      map[string]any // status.restore
	Requires    bool           // asks for the source Database
}

func restoreOutcomeOf(t *testing.T, rsp *fnv1.RunFunctionResponse) restoreOutcome {
	t.Helper()
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("Fatal: %s", r.GetMessage())
		}
	}
	st := rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue()
	o := restoreOutcome{
		Phase:    st.GetFields()["phase"].GetStringValue(),
		Record:   st.GetFields()["restore"].GetStructValue().AsMap(),
		Requires: rsp.GetRequirements().GetResources()[requirementRestoreSource] != nil,
	}
	if len(o.Record) == 0 {
		o.Record = nil
	}
	if c := conditionOf(rsp, condRestored); c != nil {
		o.Restored = strings.TrimPrefix(c.GetStatus().String(), "STATUS_CONDITION_") + "/" + c.GetReason()
	}
	if c := conditionOf(rsp, condSpecApplied); c != nil {
		o.SpecApplied = c.GetReason()
	}
	if r, ok := rsp.GetDesired().GetResources()[string(rnRestore)]; ok {
		j := decodeInto[batchv1.Job](t, r.GetResource())
		o.Job = true
		o.Image = j.Spec.Template.Spec.Containers[0].Image
		o.Attempt = j.Annotations[annotationRestoreAttempt]
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "RESTORE_BACKUP" {
				o.Backup = e.Value
			}
		}
		a := j.Spec.Template.Spec.Affinity
		o.Beside = a != nil && a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 1
	}
	return o
}

// restoreReconcile is one reconcile later than rsp for req: what rsp
// composed observed (instances ready or not, the XR status rsp wrote read
// back), the restore Job's status set to job (nil: as observedFrom leaves
// it, complete when running), or the Job gone when deleted.
func restoreReconcile(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, running bool, job *batchv1.JobStatus, deleted bool) {
	t.Helper()
	feedBack(t, req, rsp, running)
	r, ok := req.Observed.Resources[string(rnRestore)]
	switch {
	case !ok:
	case deleted:
		delete(req.Observed.Resources, string(rnRestore))
	case job != nil:
		j := decodeInto[batchv1.Job](t, r.GetResource())
		j.Status = *job
		req.Observed.Resources[string(rnRestore)] = encodeObserved(t, j)
	}
}

func jobFailedWith(reason, message string) *batchv1.JobStatus {
	return &batchv1.JobStatus{Failed: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, Message: message},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: message},
	}}
}

var (
	jobRunning  = &batchv1.JobStatus{Active: 1, Ready: ptr.To[int32](1)}
	jobPending  = &batchv1.JobStatus{Active: 1, Ready: ptr.To[int32](0)}
	jobComplete = &batchv1.JobStatus{Succeeded: 1, CompletionTime: &metav1.Time{Time: time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)},
		Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	jobBackoff = jobFailedWith(batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
)

// TestRestoreLifecycle: the restore Job is one run, never patched; its
// outcome is recorded in status.restore; a failed run can be retried; a
// missing source is said within one reconcile (issue 12 item 6). Each case
// runs reconciles in order, from the Database's creation; the outcome of
// the last one is compared.
func TestRestoreLifecycle(t *testing.T) {
	type step struct {
		spec    string             // a new spec before this reconcile ("" keeps it)
		running bool               // the instances of the previous step's StatefulSet are ready
		job     *batchv1.JobStatus // the restore Job's observed status
		deleted bool               // the restore Job was deleted
	}
	record := func(backup string, completed bool, extra ...any) map[string]any {
		m := map[string]any{"source": "orders", "backup": backup, "completed": completed}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1] //nolint:forcetypeassert // keys are strings
		}
		return m
	}
	const (
		pending   = "UNKNOWN/" + reasonRestorePending
		applied   = "Applied"
		img17     = "postgres:17"
		img172    = "postgres:17.2"
		minorRoll = `{version: "17.2", size: small, restoreFrom: {database: orders}}`
	)
	cases := map[string]struct {
		reason  string
		create  string             // the spec at creation ("": restoringXR's)
		cluster []*structpb.Struct // nil: exampleCluster
		steps   []step
		want    restoreOutcome
	}{
		"Created": {
			reason: "at creation: the Job is bounded and pinned beside the source's primary (required)",
			want:   restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Beside: true, Restored: pending, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"SourceMissing": {
			reason:  "a source that does not exist is said at once (it stayed RestorePending forever); the Job still runs, without affinity, for a deleted Database's retained volume",
			cluster: []*structpb.Struct{},
			want:    restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Restored: "FALSE/" + reasonRestoreSourceMissing, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"SourceMissingPending": {
			reason:  "the Job observed, its pod not running: still missing",
			cluster: []*structpb.Struct{},
			steps:   []step{{job: jobPending}},
			want:    restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Restored: "FALSE/" + reasonRestoreSourceMissing, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"SourceMissingRunning": {
			reason:  "once the Job's pod runs, its volume exists: no longer reported missing",
			cluster: []*structpb.Struct{},
			steps:   []step{{job: jobRunning}},
			want:    restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Restored: "UNKNOWN/" + reasonRestoreRunning, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"MinorRollWhileRunning": {
			reason: "a minor roll while the Job runs: the Job keeps its image (frozen), nothing immutable changes",
			steps:  []step{{job: jobRunning}, {spec: minorRoll, job: jobRunning}},
			want:   restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Beside: true, Restored: "UNKNOWN/" + reasonRestoreRunning, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"SourceGoneWhileRunning": {
			reason:  "the source deleted while the Job runs: the Job keeps its affinity (frozen)",
			cluster: []*structpb.Struct{},
			steps:   []step{{job: jobRunning}},
			want:    restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Restored: "UNKNOWN/" + reasonRestoreRunning, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"Succeeded": {
			reason: "a succeeded Job is recorded (completed, completionTime) and no longer composed",
			steps:  []step{{running: true, job: jobComplete}},
			want:   restoreOutcome{Restored: "TRUE/" + reasonRestoreSucceeded, SpecApplied: applied, Phase: phaseRunning, Record: record("latest", true, "completionTime", "2026-11-28T03:00:00Z")},
		},
		"SucceededThenMinorRoll": {
			reason: "restoreFrom kept set, a later minor roll: no Job, so no immutable template to change (every apply failed)",
			steps:  []step{{running: true, job: jobComplete}, {running: true}, {spec: minorRoll, running: true}},
			want:   restoreOutcome{Restored: "TRUE/" + reasonRestoreSucceeded, SpecApplied: applied, Phase: phaseRunning, Record: record("latest", true, "completionTime", "2026-11-28T03:00:00Z")},
		},
		"SucceededThenBackupEdited": {
			reason: "restoreFrom.backup edited after the restore: reported, nothing composed",
			steps:  []step{{running: true, job: jobComplete}, {running: true}, {spec: `{version: "17", size: small, restoreFrom: {database: orders, backup: orders-20261128T020000Z}}`, running: true}},
			want:   restoreOutcome{Restored: "TRUE/" + reasonRestoreSucceeded, SpecApplied: reasonRestoreAfterCreate, Phase: phaseRunning, Record: record("latest", true, "completionTime", "2026-11-28T03:00:00Z")},
		},
		"Failed": {
			reason: "a failed Job stays, frozen, and says how to retry",
			steps:  []step{{running: true, job: jobBackoff}},
			want:   restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Beside: true, Restored: "FALSE/" + reasonRestoreFailed, SpecApplied: applied, Phase: phaseFailed, Record: record("latest", false), Requires: true},
		},
		"FailedJobDeleted": {
			reason: "the failed Job deleted: a new run (it was 'restoreFrom was set after the database was created' and phase Running on an empty database)",
			steps:  []step{{running: true, job: jobBackoff}, {running: true, deleted: true}},
			want:   restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "0", Beside: true, Restored: pending, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false), Requires: true},
		},
		"FailedThenAttemptRaised": {
			reason: "spec.restoreFrom.attempt raised after a failure: the failed Job is dropped (replaced)...",
			steps: []step{{running: true, job: jobBackoff},
				{running: true, job: jobBackoff, spec: `{version: "17", size: small, restoreFrom: {database: orders, attempt: 1}}`}},
			want: restoreOutcome{Restored: "UNKNOWN/" + reasonRestoreReplacing, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false, "attempt", 1.0), Requires: true},
		},
		"FailedThenAttemptRaisedNext": {
			reason: "...and once it is gone, a new Job runs attempt 1",
			steps: []step{{running: true, job: jobBackoff},
				{running: true, job: jobBackoff, spec: `{version: "17", size: small, restoreFrom: {database: orders, attempt: 1}}`},
				{running: true}},
			want: restoreOutcome{Job: true, Backup: "latest", Image: img17, Attempt: "1", Beside: true, Restored: pending, SpecApplied: applied, Phase: phaseProvisioning, Record: record("latest", false, "attempt", 1.0), Requires: true},
		},
		"BackupEditedWhileRunning": {
			reason: "restoreFrom.backup edited while the Job runs: replaced, never patched (the template is immutable)",
			steps:  []step{{job: jobRunning}, {job: jobRunning, spec: `{version: "17", size: small, restoreFrom: {database: orders, backup: orders-20261128T020000Z}}`}},
			want:   restoreOutcome{Restored: "UNKNOWN/" + reasonRestoreReplacing, SpecApplied: applied, Phase: phaseProvisioning, Record: record("orders-20261128T020000Z", false), Requires: true},
		},
		"BackupEditedWhileRunningNext": {
			reason: "the replacement runs the backup now named, with the image of now",
			steps: []step{{job: jobRunning}, {job: jobRunning, spec: `{version: "17.2", size: small, restoreFrom: {database: orders, backup: orders-20261128T020000Z}}`},
				{}},
			want: restoreOutcome{Job: true, Backup: "orders-20261128T020000Z", Image: img172, Attempt: "0", Beside: true, Restored: pending, SpecApplied: applied, Phase: phaseProvisioning, Record: record("orders-20261128T020000Z", false), Requires: true},
		},
		"SetAfterCreation": {
			reason: "restoreFrom added to a running Database that never restored: refused, as before",
			create: `{version: "17", size: small}`,
			steps:  []step{{running: true}, {running: true, spec: `{version: "17", size: small, restoreFrom: {database: orders}}`}},
			want:   restoreOutcome{SpecApplied: reasonRestoreAfterCreate, Phase: phaseRunning},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cluster := tc.cluster
			if cluster == nil {
				cluster = exampleCluster(t)
			}
			req := xrRequest(yamlStruct(t, restoringXR), nil)
			if tc.create != "" {
				setSpec(t, req, tc.create)
			}
			rsp := runTestIn(t, req, cluster)
			for _, s := range tc.steps {
				if s.spec != "" {
					setSpec(t, req, s.spec)
				}
				restoreReconcile(t, req, rsp, s.running, s.job, s.deleted)
				rsp = runTestIn(t, req, cluster)
			}
			if d := cmp.Diff(tc.want, restoreOutcomeOf(t, rsp)); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestRestoreFailureReasons: a failed restore Job's cause, from its Failed
// condition, is named in Restored with the fix: a refusal (exit 3) and a
// backup that is not there (exit 4) fail the Job at once through its
// podFailurePolicy; a deadline and used-up retries say how to run again.
func TestRestoreFailureReasons(t *testing.T) {
	const pfp = "Container restore for pod shop/orders-v17-restore-x7k2p failed with exit code %d matching FailJob rule at index 1"
	cases := map[string]struct {
		reason string
		job    *batchv1.JobStatus
		want   string   // condition reason
		says   []string // in the message
	}{
		"Refused": {"the database holds tables (exit 3)", jobFailedWith(batchv1.JobReasonPodFailurePolicy, fmt.Sprintf(pfp, restoreRefused)),
			reasonRestoreRefused, []string{"already holds user tables", "remove spec.restoreFrom", "new Database"}},
		"NoBackup": {"no such backup, or it does not verify (exit 4)", jobFailedWith(batchv1.JobReasonPodFailurePolicy, fmt.Sprintf(pfp, restoreNoBackup)),
			reasonRestoreBackupMissing, []string{"backups-orders-0", "spec.restoreFrom.backup", "spec.restoreFrom.attempt to 1"}},
		"Deadline": {"past its bound", jobFailedWith(batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline"),
			reasonRestoreTimedOut, []string{restoreDeadlineText, "backups-orders-0", "spec.restoreFrom.attempt to 1", "delete Job orders-v17-restore"}},
		"Backoff": {"every retry failed", jobBackoff,
			reasonRestoreFailed, []string{"BackoffLimitExceeded", "spec.restoreFrom.attempt to 1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, restoringXR), nil)
			rsp := runTest(t, req)
			restoreReconcile(t, req, rsp, true, tc.job, false)
			rsp = runTest(t, req)
			c := conditionOf(rsp, condRestored)
			if c.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE || c.GetReason() != tc.want {
				t.Fatalf("%s: want Restored False/%s, got %v", tc.reason, tc.want, c)
			}
			for _, s := range tc.says {
				if !strings.Contains(c.GetMessage(), s) {
					t.Errorf("%s: the message does not say %q: %s", tc.reason, s, c.GetMessage())
				}
			}
		})
	}
}

// TestRestoreJobBounded: the restore Job is bounded (deadline over all its
// attempts and its time pending, a retry limit), fails at once on the exit
// codes restore.sh uses for what no retry changes, does not count an
// eviction, and runs beside the source's primary, required (a preferred
// affinity let it land elsewhere and hang on Multi-Attach).
func TestRestoreJobBounded(t *testing.T) {
	if d, err := time.ParseDuration(restoreDeadlineText); err != nil || d != restoreDeadline {
		t.Fatalf("restoreDeadlineText %q is not restoreDeadline %v", restoreDeadlineText, restoreDeadline)
	}
	// The script's failures the policy fails at once, by their exit code.
	for line, code := range map[string]int{`fail "REFUSED: `: restoreRefused, `fail "backup $b not found in $RESTORE_DIR"`: restoreNoBackup, `fail "no good backup`: restoreNoBackup} {
		found := false
		for l := range strings.SplitSeq(scriptFiles[scripts.Restore], "\n") {
			if strings.Contains(l, line) {
				found = strings.HasSuffix(l, fmt.Sprintf("\" %d", code))
			}
		}
		if !found {
			t.Errorf("restore.sh's %s... does not exit %d, as the Job's podFailurePolicy expects", line, code)
		}
	}
	rsp := runTest(t, xrRequest(yamlStruct(t, restoringXR), nil))
	j := decodeInto[batchv1.Job](t, rsp.GetDesired().GetResources()[string(rnRestore)].GetResource())
	type bounds struct {
		BackoffLimit          *int32
		ActiveDeadlineSeconds *int64
		PodFailurePolicy      *batchv1.PodFailurePolicy
		Affinity              *corev1.Affinity
	}
	want := bounds{
		BackoffLimit:          ptr.To[int32](6),
		ActiveDeadlineSeconds: ptr.To[int64](12 * 3600),
		PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
			{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To("restore"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3, 4}}},
		}},
		Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "statefulset.kubernetes.io/pod-name": "orders-0",
			}},
			TopologyKey: "kubernetes.io/hostname",
		}}}},
	}
	got := bounds{j.Spec.BackoffLimit, j.Spec.ActiveDeadlineSeconds, j.Spec.PodFailurePolicy, j.Spec.Template.Spec.Affinity}
	// The source's backups, read-only: they outlive the source under Retain.
	if vol := j.Spec.Template.Spec.Volumes[0]; vol.PersistentVolumeClaim == nil || vol.PersistentVolumeClaim.ClaimName != "backups-orders-0" || !vol.PersistentVolumeClaim.ReadOnly {
		t.Errorf("the restore Job must mount the source's backups read-only, got %+v", vol)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("restore Job bounds (-want +got):\n%s", d)
	}
}

// TestRestoreSourceLookup: the source Database is asked for through
// Crossplane's required resources, by name in the namespace for a Database,
// by its claim's labels for a legacy XR; a legacy source found is pinned
// beside, one not found is reported.
func TestRestoreSourceLookup(t *testing.T) {
	legacy := func(t *testing.T) *fnv1.RunFunctionRequest {
		xr := readYAMLStruct(t, "example/legacy/xr.yaml")
		xr.Fields["metadata"].GetStructValue().Fields["labels"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			labelClaimName: structpb.NewStringValue("inventory-v17"), labelClaimNamespace: structpb.NewStringValue("warehouse"),
		}})
		xr.Fields["metadata"].GetStructValue().Fields["name"] = structpb.NewStringValue("inventory-v17-4fj2k")
		setSpecOf(t, xr, `{version: "17", size: small, restoreFrom: {database: inventory}}`)
		return xrRequest(xr, nil)
	}
	cases := map[string]struct {
		reason   string
		req      func(t *testing.T) *fnv1.RunFunctionRequest
		cluster  []*structpb.Struct
		selector *fnv1.ResourceSelector
		beside   bool
		restored string
	}{
		"Namespaced": {"a Database: by name in its namespace", func(t *testing.T) *fnv1.RunFunctionRequest { return xrRequest(yamlStruct(t, restoringXR), nil) }, nil,
			&fnv1.ResourceSelector{ApiVersion: "example.com/v1", Kind: "Database", Match: &fnv1.ResourceSelector_MatchName{MatchName: "orders"}, Namespace: ptr.To("shop")},
			true, reasonRestorePending},
		"Legacy": {"a legacy XR: the XR of the claim of that name and namespace", legacy, nil,
			&fnv1.ResourceSelector{ApiVersion: "legacy.example.com/v1", Kind: "XDatabase", Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{
				labelClaimName: "inventory", labelClaimNamespace: "warehouse"}}}},
			true, reasonRestorePending},
		"LegacyMissing": {"a legacy source that does not exist", legacy, []*structpb.Struct{},
			&fnv1.ResourceSelector{ApiVersion: "legacy.example.com/v1", Kind: "XDatabase", Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{
				labelClaimName: "inventory", labelClaimNamespace: "warehouse"}}}},
			false, reasonRestoreSourceMissing},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cluster := tc.cluster
			if cluster == nil {
				cluster = exampleCluster(t)
			}
			rsp := runTestIn(t, tc.req(t), cluster)
			if d := cmp.Diff(tc.selector, rsp.GetRequirements().GetResources()[requirementRestoreSource], protocmp.Transform()); d != "" {
				t.Errorf("%s: requirement (-want +got):\n%s", tc.reason, d)
			}
			o := restoreOutcomeOf(t, rsp)
			if !o.Job || o.Beside != tc.beside || !strings.HasSuffix(o.Restored, "/"+tc.restored) {
				t.Errorf("%s: got %+v, want a Job (beside the source: %v) and Restored %s", tc.reason, o, tc.beside, tc.restored)
			}
		})
	}
	// Before Crossplane has answered (the first call of a reconcile), no
	// new Job: its affinity depends on the answer.
	first := runOnce(t, xrRequest(yamlStruct(t, restoringXR), nil))
	if _, ok := first.GetDesired().GetResources()[string(rnRestore)]; ok || first.GetRequirements() == nil {
		t.Errorf("first call: want the requirement and no Job yet, got requirements %v and Job %v", first.GetRequirements(), ok)
	}
}
