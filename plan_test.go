package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnresource "github.com/crossplane/function-sdk-go/resource"
)

func TestVolumeTemplatesNeverChange(t *testing.T) {
	cases := map[string]struct {
		reason     string
		spec       string
		wantData   string
		wantReason string
	}{
		"Shrink":       {"a smaller size keeps the observed volumes", `{version: "16", size: medium, storage: {size: 5Gi}}`, "20Gi", reasonStorageShrink},
		"Grow":         {"growing is not supported yet: kept and said", `{version: "16", size: medium, storage: {size: 40Gi}}`, "20Gi", reasonStorageGrow},
		"Class":        {"a class change is refused", `{version: "16", size: medium, storage: {storageClassName: other}}`, "20Gi", reasonStorageClass},
		"BackupVolume": {"the backup volume is fixed", `{version: "16", size: medium, backup: {storage: 99Gi}}`, "20Gi", reasonBackupStorage},
		"Tier":         {"a tier change keeps the volumes, unreported (TestTierChangeAdoptsVolumes)", `{version: "16", size: large}`, "20Gi", ""},
		"Same":         {"the same size is applied", `{version: "16", size: medium, storage: {size: 20Gi}}`, "20Gi", ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, validXR)
			before := desiredSTS(t, runTest(t, req)).Spec.VolumeClaimTemplates
			setSpec(t, req, tc.spec)
			rsp := runTest(t, req)
			got := desiredSTS(t, rsp).Spec.VolumeClaimTemplates
			if d := cmp.Diff(before, got); d != "" {
				t.Errorf("%s: volumeClaimTemplates changed (-before +after):\n%s", tc.reason, d)
			}
			if q := got[0].Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse(tc.wantData)) != 0 {
				t.Errorf("data volume %s, want %s", q.String(), tc.wantData)
			}
			// The WAL bounds follow the volume the instances have (20Gi:
			// the slot bound at its 2048MB cap), not the spec's.
			conf := rsp.GetDesired().GetResources()[string(rnScripts)].GetResource().GetFields()["data"].GetStructValue().GetFields()[keyPostgresqlConf].GetStringValue()
			if !strings.Contains(conf, "max_slot_wal_keep_size = '2048MB'\n") {
				t.Errorf("postgresql.conf does not bound the WAL by the kept 20Gi volume:\n%s", conf)
			}
			c := conditionOf(rsp, condSpecApplied)
			if tc.wantReason == "" {
				if c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE || len(rsp.GetResults()) != 0 {
					t.Errorf("want SpecApplied True and no results, got %v %v", c, rsp.GetResults())
				}
				return
			}
			if c.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE || !strings.Contains(c.GetMessage(), "keeping") {
				t.Errorf("want SpecApplied False explaining what is kept, got %v", c)
			}
			found := false
			for _, r := range rsp.GetResults() {
				found = found || (r.GetReason() == tc.wantReason && r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING)
			}
			if !found {
				t.Errorf("want a Warning with reason %s, got %v", tc.wantReason, rsp.GetResults())
			}
		})
	}
}

func TestMajorVersionChangeRefused(t *testing.T) {
	cases := map[string]struct {
		version   string
		wantImage string
		blocked   bool
		verb      string
	}{
		"Downgrade":  {"15", "postgres:16", true, "downgrade"},
		"Upgrade":    {"17", "postgres:16", true, "upgrade"},
		"MinorRolls": {"16.4", "postgres:16.4", false, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"16\", size: medium, backup: {enabled: true}}")
			setSpec(t, req, `{version: "`+tc.version+`", size: medium, backup: {enabled: true}}`)
			rsp := runTest(t, req)
			sts := desiredSTS(t, rsp)
			for _, c := range sts.Spec.Template.Spec.Containers {
				if c.Image != tc.wantImage {
					t.Errorf("container %s image %s, want %s", c.Name, c.Image, tc.wantImage)
				}
			}
			cj := decodeInto[batchv1.CronJob](t, rsp.Desired.Resources["backup"].GetResource())
			if img := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image; img != tc.wantImage {
				t.Errorf("backup image %s, want %s (pg_dump must match the server's major)", img, tc.wantImage)
			}
			if sts.Annotations[annotationMajor] != "16" {
				t.Errorf("major annotation %q, want 16", sts.Annotations[annotationMajor])
			}
			c := conditionOf(rsp, condSpecApplied)
			if !tc.blocked {
				if c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE {
					t.Errorf("a minor roll must apply, got %v", c)
				}
				return
			}
			if c.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE || c.GetReason() != reasonMajorVersionChange ||
				!strings.Contains(c.GetMessage(), "restoreFrom") || !strings.Contains(c.GetMessage(), tc.verb) {
				t.Errorf("want SpecApplied False/%s naming restoreFrom and %q, got %v", reasonMajorVersionChange, tc.verb, c)
			}
		})
	}
}

func TestInitializedIsSticky(t *testing.T) {
	req := xrRequest(yamlStruct(t, validXR), nil)
	first := runTest(t, req)
	cm := decodeInto[corev1.ConfigMap](t, first.Desired.Resources["scripts"].GetResource())
	if _, ok := cm.Data[keyInitialized]; ok {
		t.Fatalf("a new Database must not be marked initialized")
	}
	// Starting: instances not ready yet, so still not initialized.
	req.Observed.Resources = observedFrom(t, first, false)
	if cm := decodeInto[corev1.ConfigMap](t, runTest(t, req).Desired.Resources["scripts"].GetResource()); cm.Data[keyInitialized] != "" {
		t.Fatalf("marked initialized before any instance was ready")
	}
	// Ready once: initialized.
	req.Observed.Resources = observedFrom(t, first, true)
	running := runTest(t, req)
	if cm := decodeInto[corev1.ConfigMap](t, running.Desired.Resources["scripts"].GetResource()); cm.Data[keyInitialized] != "true" {
		t.Fatalf("not marked initialized after the StatefulSet was ready")
	}
	// Every instance lost afterwards: the marker stays, the phase is Degraded.
	req.Observed.Resources = observedFrom(t, running, false)
	rsp := runTest(t, req)
	if cm := decodeInto[corev1.ConfigMap](t, rsp.Desired.Resources["scripts"].GetResource()); cm.Data[keyInitialized] != "true" {
		t.Fatalf("the initialized marker was dropped")
	}
	if ph := rsp.Desired.Composite.Resource.Fields["status"].GetStructValue().Fields["phase"].GetStringValue(); ph != phaseDegraded {
		t.Errorf("phase %s, want %s", ph, phaseDegraded)
	}
	// The marker must not roll the pods: the config hash ignores it.
	if a, b := desiredSTS(t, first).Spec.Template.Annotations, desiredSTS(t, rsp).Spec.Template.Annotations; !cmp.Equal(a, b) {
		t.Errorf("the initialized marker changed the pod template: %v vs %v", a, b)
	}
}

// TestTierChangeAdoptsVolumes: volume sizes and classes spec leaves to the
// tier or the input apply at creation; afterwards the volumes that exist are
// adopted, and only a size or class spec sets explicitly, different from
// what exists, is reported (medium to large used to report "spec.storage.size
// 50Gi is larger than the data volumes' 20Gi", a field the user never set,
// with a Warning on every reconcile).
func TestTierChangeAdoptsVolumes(t *testing.T) {
	const input = "apiVersion: database.fn.example.com/v1beta1\nkind: Input\nstorageClassName: fast\n"
	applied := &fnv1.Condition{Type: condSpecApplied, Status: fnv1.Status_STATUS_CONDITION_TRUE, Reason: "Applied", Message: ptr.To("every field of spec is applied"), Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum()}
	refused := func(reason, msg string) ([]*fnv1.Result, *fnv1.Condition) {
		return []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_WARNING, Message: msg, Reason: ptr.To(reason), Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum()}},
			&fnv1.Condition{Type: condSpecApplied, Status: fnv1.Status_STATUS_CONDITION_FALSE, Reason: reason, Message: ptr.To(msg), Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum()}
	}
	grow, growCond := refused(reasonStorageGrow, "spec.storage.size 50Gi is larger than the data volumes' 20Gi; growing volumes is not supported yet, keeping 20Gi")
	backupSize, backupCond := refused(reasonBackupStorage, "spec.backup.storage 10Gi differs from the backup volume's 20Gi, which is fixed at creation; keeping 20Gi")
	class, classCond := refused(reasonStorageClass, `spec.storage.storageClassName "slow" differs from the data volumes' "fast", which is fixed at creation; keeping "fast"`)
	cases := map[string]struct {
		reason      string
		spec        string
		input       string // the input of the change; the Database was created with input
		wantResults []*fnv1.Result
		wantCond    *fnv1.Condition
	}{
		"MediumToLarge":     {"a larger tier adopts the 20Gi volumes", `{version: "16", size: large}`, input, nil, applied},
		"MediumToSmall":     {"a smaller tier adopts them too: nothing shrinks, nothing to say", `{version: "16", size: small}`, input, nil, applied},
		"InputClassChanged": {"the platform's default class changed: existing volumes keep theirs", `{version: "16", size: medium}`, "apiVersion: database.fn.example.com/v1beta1\nkind: Input\nstorageClassName: other\n", nil, applied},
		"ExplicitSize":      {"a size spec sets is still reported", `{version: "16", size: large, storage: {size: 50Gi}}`, input, grow, growCond},
		"ExplicitSameSize":  {"a size spec sets equal to the volumes' is applied", `{version: "16", size: large, storage: {size: 20Gi}}`, input, nil, applied},
		"ExplicitBackup":    {"a backup size spec sets is still reported", `{version: "16", size: small, backup: {storage: 10Gi}}`, input, backupSize, backupCond},
		"ExplicitClass":     {"a class spec sets is still reported", `{version: "16", size: medium, storage: {storageClassName: slow}}`, input, class, classCond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, validXR), yamlStruct(t, input))
			req.Observed.Resources = observedFrom(t, runTest(t, req), true)
			before := desiredSTS(t, runTest(t, req)).Spec.VolumeClaimTemplates
			setSpec(t, req, tc.spec)
			req.Input = yamlStruct(t, tc.input)
			rsp := runTest(t, req)
			if d := cmp.Diff(before, desiredSTS(t, rsp).Spec.VolumeClaimTemplates); d != "" {
				t.Errorf("%s: volumeClaimTemplates changed (-before +after):\n%s", tc.reason, d)
			}
			if d := cmp.Diff(tc.wantResults, rsp.GetResults(), protocmp.Transform(), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("%s: results (-want +got):\n%s", tc.reason, d)
			}
			if d := cmp.Diff(tc.wantCond, conditionOf(rsp, condSpecApplied), protocmp.Transform()); d != "" {
				t.Errorf("%s: SpecApplied (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestPlanKeepsTheSpec: the plan says what it decided and never rewrites
// the parsed spec. With the primary at ordinal 2 after a failover and the
// size now medium (2 instances), the plan composes 3 (scaling in would
// delete the primary) while db.Tier still says medium's 2.
func TestPlanKeepsTheSpec(t *testing.T) {
	cfg, errs := parseInput(nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	db, errs := parseDatabase(yamlStruct(t, `
apiVersion: example.com/v1
kind: Database
metadata: {name: orders, namespace: shop}
spec: {version: "16", size: medium}`), cfg)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	before := db.Tier.Replicas
	o := observedOf(t, map[fnresource.Name]runtime.Object{
		rnScripts:     &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, Data: map[string]string{keyPrimary: "2", keyInitialized: "true"}},
		rnStatefulSet: &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}},
	})
	p := makePlan(db, o, func() string { return "pw" })
	if p.Primary != 2 || p.Replicas != 3 {
		t.Errorf("plan: primary %d, replicas %d; want 2 and 3", p.Primary, p.Replicas)
	}
	if db.Tier.Replicas != before {
		t.Errorf("makePlan rewrote db.Tier.Replicas from %d to %d", before, db.Tier.Replicas)
	}
	sts, ok := compose(db, p)[rnStatefulSet].(*appsv1.StatefulSet)
	if !ok || *sts.Spec.Replicas != 3 {
		t.Errorf("the StatefulSet composes %v replicas, want 3", sts.Spec.Replicas)
	}
}
