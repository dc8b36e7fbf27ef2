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
