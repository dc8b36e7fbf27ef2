package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

func TestNewlyBlocked(t *testing.T) {
	shrink := blocked{reasonStorageShrink, "spec.storage.size 5Gi is smaller than the data volumes' 20Gi; volumes never shrink (data would be lost), keeping 20Gi"}
	class := blocked{reasonStorageClass, `spec.storage.storageClassName "slow" differs from the data volumes' "fast", which is fixed at creation; keeping "fast"`}
	xr := func(conds ...map[string]any) *structpb.Struct {
		l := make([]any, 0, len(conds))
		for _, c := range conds {
			l = append(l, c)
		}
		s, err := structpb.NewStruct(map[string]any{"apiVersion": "example.com/v1", "kind": "Database", "status": map[string]any{"conditions": l}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	specApplied := func(status, msg string) map[string]any {
		return map[string]any{"type": condSpecApplied, "status": status, "reason": "Any", "message": msg, "lastTransitionTime": "2026-11-28T02:00:00Z"}
	}
	cases := map[string]struct {
		reason string
		xr     *structpb.Struct
		bs     []blocked
		want   []blocked
	}{
		"NothingBlocked": {"no blocked change, no Warning", xr(specApplied("False", shrink.Message)), nil, nil},
		"NoStatus":       {"a new XR: every blocked change is new", &structpb.Struct{}, []blocked{shrink}, []blocked{shrink}},
		"OtherCondition": {"conditions without SpecApplied report nothing", xr(map[string]any{"type": "Ready", "status": "True", "reason": "Available"}), []blocked{shrink}, []blocked{shrink}},
		"AppliedBefore":  {"SpecApplied True: the blocked change just appeared", xr(specApplied("True", "every field of spec is applied")), []blocked{shrink}, []blocked{shrink}},
		"Reported":       {"the condition already reports it: no Warning on every call", xr(specApplied("False", shrink.Message)), []blocked{shrink}, nil},
		"ReportedAmong":  {"reported within a joined message", xr(specApplied("False", class.Message+"; "+shrink.Message+"; storage is deprecated")), []blocked{shrink, class}, nil},
		"OneNew":         {"a second blocked change appears next to a reported one", xr(specApplied("False", shrink.Message)), []blocked{shrink, class}, []blocked{class}},
		"OtherValue":     {"the user asks for another size: a new refusal", xr(specApplied("False", "spec.storage.size 4Gi is smaller than the data volumes' 20Gi; volumes never shrink (data would be lost), keeping 20Gi")), []blocked{shrink}, []blocked{shrink}},
		"Unreadable":     {"a condition that does not decode is as if absent", xr(map[string]any{"type": condSpecApplied, "status": "False", "message": shrink.Message, "lastTransitionTime": "yesterday"}), []blocked{shrink}, []blocked{shrink}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := newlyBlocked(tc.xr, tc.bs)
			if d := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("%s: newlyBlocked (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestNewlyWarned: a failover warning is emitted while the observed XR's
// Failover condition does not say it, whatever the condition's status.
func TestNewlyWarned(t *testing.T) {
	refused := warning{reasonOldTimeline, "failover Job orders-failover reported orders-0 promoted on timeline 2, not above timeline 3"}
	invalid := warning{reasonPrimaryInvalid, `key primary of ConfigMap orders-scripts is "7": no instance of the 2`}
	xr := func(conds ...any) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{"apiVersion": "example.com/v1", "kind": "Database", "status": map[string]any{"conditions": conds}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	failover := func(status, msg string) map[string]any {
		return map[string]any{"type": condFailover, "status": status, "reason": "Any", "message": msg, "lastTransitionTime": "2026-11-28T02:00:00Z"}
	}
	cases := map[string]struct {
		reason string
		xr     *structpb.Struct
		ws     []warning
		want   []warning
	}{
		"None":         {"nothing to warn about", xr(failover("False", "primary orders-0")), nil, nil},
		"NoStatus":     {"a new XR: warned", &structpb.Struct{}, []warning{refused}, []warning{refused}},
		"OtherMessage": {"the condition says something else: warned", xr(failover("False", "primary orders-0; failover is armed")), []warning{refused}, []warning{refused}},
		"Reported":     {"the condition says it: not again", xr(failover("False", refused.Message)), []warning{refused}, nil},
		"ReportedTrue": {"within a True condition's message", xr(failover("True", "primary orders-0 is not ready; "+invalid.Message)), []warning{invalid}, nil},
		"OneNew":       {"one said, one new", xr(failover("False", refused.Message)), []warning{refused, invalid}, []warning{invalid}},
		"OtherType":    {"only the Failover condition counts", xr(map[string]any{"type": condSpecApplied, "status": "False", "reason": "Any", "message": refused.Message, "lastTransitionTime": "2026-11-28T02:00:00Z"}), []warning{refused}, []warning{refused}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, newlyWarned(tc.xr, condFailover, tc.ws), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("%s: newlyWarned (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestWarningOnlyWhenBlockedFirst plays reconciles of a Database whose spec
// asks for a smaller volume, with Crossplane writing the function's
// conditions to the XR between calls: the Warning comes once per blocked
// change, the SpecApplied condition on every call.
func TestWarningOnlyWhenBlockedFirst(t *testing.T) {
	req := runningRequest(t, validXR)
	steps := []struct {
		reason      string
		spec        string
		wantWarning string // the reason of the one Warning, or none
		wantApplied fnv1.Status
	}{
		{"the shrink appears: warned", `{version: "16", size: medium, storage: {size: 5Gi}}`, reasonStorageShrink, fnv1.Status_STATUS_CONDITION_FALSE},
		{"the same shrink, reported by the condition: no Warning", `{version: "16", size: medium, storage: {size: 5Gi}}`, "", fnv1.Status_STATUS_CONDITION_FALSE},
		{"another size is a new refusal: warned", `{version: "16", size: medium, storage: {size: 4Gi}}`, reasonStorageShrink, fnv1.Status_STATUS_CONDITION_FALSE},
		{"and reported from then on", `{version: "16", size: medium, storage: {size: 4Gi}}`, "", fnv1.Status_STATUS_CONDITION_FALSE},
		{"the spec moves back: applied, nothing to warn about", `{version: "16", size: medium}`, "", fnv1.Status_STATUS_CONDITION_TRUE},
		{"the shrink again after being applied: warned", `{version: "16", size: medium, storage: {size: 5Gi}}`, reasonStorageShrink, fnv1.Status_STATUS_CONDITION_FALSE},
	}
	for i, s := range steps {
		setSpec(t, req, s.spec)
		rsp := runTest(t, req)
		var warnings []string
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING {
				warnings = append(warnings, r.GetReason())
			}
		}
		var want []string
		if s.wantWarning != "" {
			want = []string{s.wantWarning}
		}
		if d := cmp.Diff(want, warnings, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("step %d, %s: Warnings (-want +got):\n%s", i, s.reason, d)
		}
		if got := conditionOf(rsp, condSpecApplied).GetStatus(); got != s.wantApplied {
			t.Errorf("step %d, %s: SpecApplied %v, want %v", i, s.reason, got, s.wantApplied)
		}
		writeConditions(t, req.Observed.Composite.Resource, rsp)
	}
}

// writeConditions sets the response's conditions on the XR's status as
// Crossplane does: type, status True/False/Unknown, reason, message and a
// transition time.
func writeConditions(t *testing.T, xr *structpb.Struct, rsp *fnv1.RunFunctionResponse) {
	t.Helper()
	status := map[fnv1.Status]string{
		fnv1.Status_STATUS_CONDITION_TRUE:    "True",
		fnv1.Status_STATUS_CONDITION_FALSE:   "False",
		fnv1.Status_STATUS_CONDITION_UNKNOWN: "Unknown",
	}
	conds := make([]any, 0, len(rsp.GetConditions()))
	for _, c := range rsp.GetConditions() {
		conds = append(conds, map[string]any{"type": c.GetType(), "status": status[c.GetStatus()], "reason": c.GetReason(), "message": c.GetMessage(), "lastTransitionTime": "2026-11-28T02:00:00Z"})
	}
	st := structAt(xr, "status")
	if st == nil {
		st = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		xr.Fields["status"] = structpb.NewStructValue(st)
	}
	l, err := structpb.NewList(conds)
	if err != nil {
		t.Fatal(err)
	}
	st.Fields["conditions"] = structpb.NewListValue(l)
}
