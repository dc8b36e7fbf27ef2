package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
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

// TestSpreadInstances: a new Database requires a node per instance, so that
// losing a node loses one instance at most; the input can relax it for a
// cluster with fewer nodes. A Database that exists keeps the placement its
// pods run with unless the input says otherwise: an upgrade of the function
// must not roll instances that share a node (and its local volumes) into
// pods no node can take. Zones are always preferred, never required.
func TestSpreadInstances(t *testing.T) {
	const (
		required  = "required"
		preferred = "preferred"
	)
	for name, tc := range map[string]struct {
		input    string // the input's spread.nodes, "" unset
		observed string // the observed pod template's, "" no StatefulSet
		want     string
	}{
		"New":                        {"", "", required},
		"NewPreferredByInput":        {spreadPreferred, "", preferred},
		"ExistingRequired":           {"", required, required},
		"ExistingPreferredKeepsIt":   {"", preferred, preferred},
		"ExistingPreferredInputSays": {spreadRequired, preferred, required},
		"ExistingRequiredInputSays":  {spreadPreferred, required, preferred},
	} {
		t.Run(name, func(t *testing.T) {
			input := "apiVersion: database.fn.example.com/v1beta1\nkind: Input\n"
			if tc.input != "" {
				input += "spread: {nodes: " + tc.input + "}\n"
			}
			req := xrRequest(yamlStruct(t, validXR), yamlStruct(t, input))
			setSpec(t, req, `{version: "16", size: large}`)
			if tc.observed != "" {
				req.Input = nil
				rsp := runTest(t, req)
				feedBack(t, req, rsp, true)
				sts := decodeInto[appsv1.StatefulSet](t, req.Observed.Resources[string(rnStatefulSet)].GetResource())
				sts.Spec.Template.Spec.Affinity = spreadInstances(testDB(), tc.observed == required)
				req.Observed.Resources[string(rnStatefulSet)] = encodeObserved(t, sts)
				req.Input = yamlStruct(t, input)
			}
			sts := desiredSTS(t, runTest(t, req))
			spec := sts.Spec.Template.Spec
			anti := spec.Affinity.PodAntiAffinity
			got := map[bool]string{true: required, false: preferred}[len(anti.RequiredDuringSchedulingIgnoredDuringExecution) > 0]
			if got != tc.want || len(anti.RequiredDuringSchedulingIgnoredDuringExecution)+len(anti.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatalf("anti-affinity %+v, want %s only", anti, tc.want)
			}
			zones := []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "postgresql", "app.kubernetes.io/instance": "orders", "app.kubernetes.io/component": "database"}},
			}}
			if d := cmp.Diff(zones, spec.TopologySpreadConstraints); d != "" {
				t.Errorf("topology spread (-want +got):\n%s", d)
			}
			// The term selects the instances and none of the Jobs' pods:
			// the scheduler keeps a pod off every node whose pods' required
			// anti-affinity selects it (the volume dump must run beside
			// ordinal 0; the failover Job anywhere).
			var term corev1.PodAffinityTerm
			if tc.want == required {
				term = anti.RequiredDuringSchedulingIgnoredDuringExecution[0]
			} else {
				term = anti.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
			}
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(k8slabels.Set(sts.Spec.Template.Labels)) {
				t.Errorf("the anti-affinity term %v does not select the instance pods", sel)
			}
			for _, c := range []string{componentBackup, componentRestore, componentFailover, componentDrill, componentFullBackup, componentArchiveCheck} {
				if sel.Matches(k8slabels.Set(labels(testDB(), c))) {
					t.Errorf("the anti-affinity term %v selects the %s Job's pods", sel, c)
				}
			}
		})
	}
}
