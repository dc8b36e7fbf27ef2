package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
)

func TestDeletionPolicy(t *testing.T) {
	for policy, want := range map[string]appsv1.PersistentVolumeClaimRetentionPolicyType{
		"":       appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		"Retain": appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
		"Delete": appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
	} {
		req := xrRequest(yamlStruct(t, validXR), nil)
		spec := `{version: "16", size: small}`
		if policy != "" {
			spec = `{version: "16", size: small, deletionPolicy: ` + policy + `}`
		}
		setSpec(t, req, spec)
		sts := desiredSTS(t, runTest(t, req))
		got := sts.Spec.PersistentVolumeClaimRetentionPolicy
		if got.WhenDeleted != want || got.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
			t.Errorf("deletionPolicy %q: retention %+v, want whenDeleted %s, whenScaled Retain", policy, got, want)
		}
		// The backup volume is a claim template from the start, backups on
		// or off: templates cannot be added later.
		names := []string{}
		for _, c := range sts.Spec.VolumeClaimTemplates {
			names = append(names, c.Name)
		}
		if d := cmp.Diff([]string{"data", "backups"}, names); d != "" {
			t.Errorf("volume claim templates (-want +got):\n%s", d)
		}
	}
}

// TestPodManagementPolicy: new StatefulSets start their pods in parallel (a
// full restart with the primary above ordinal 0 waited forever under
// OrderedReady for ordinal 0, a standby, to be ready); the policy is
// immutable, so an observed StatefulSet keeps the one it has.
func TestPodManagementPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		observed appsv1.PodManagementPolicyType // "": no StatefulSet yet
		want     appsv1.PodManagementPolicyType
	}{
		"New":                 {"", appsv1.ParallelPodManagement},
		"CreatedParallel":     {appsv1.ParallelPodManagement, appsv1.ParallelPodManagement},
		"CreatedOrderedReady": {appsv1.OrderedReadyPodManagement, appsv1.OrderedReadyPodManagement},
	} {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, validXR), nil)
			setSpec(t, req, `{version: "16", size: medium}`)
			if tc.observed != "" {
				rsp := runTest(t, req)
				feedBack(t, req, rsp, true)
				sts := decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource())
				sts.Spec.PodManagementPolicy = tc.observed
				req.Observed.Resources[string(rnStatefulSet)] = encodeObserved(t, sts)
			}
			if got := desiredSTS(t, runTest(t, req)).Spec.PodManagementPolicy; got != tc.want {
				t.Errorf("podManagementPolicy %s, want %s", got, tc.want)
			}
		})
	}
}
