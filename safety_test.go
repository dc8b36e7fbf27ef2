package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// decodeInto decodes a desired or observed resource into its typed kind.
func decodeInto[T any](t testing.TB, s *structpb.Struct) *T {
	t.Helper()
	if s == nil {
		t.Fatalf("resource missing")
	}
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(out); err != nil {
		t.Fatalf("cannot decode %T strictly: %v", out, err)
	}
	return out
}

func encodeObserved(t testing.TB, obj runtime.Object) *fnv1.Resource {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	s, err := structpb.NewStruct(normalise(m).(map[string]any)) //nolint:forcetypeassert // maps stay maps
	if err != nil {
		t.Fatal(err)
	}
	return &fnv1.Resource{Resource: s}
}

// runningRequest is the medium example (or xr) running: composed, observed,
// ready. mutate edits the spec of the XR before the call.
func runningRequest(t *testing.T, xr string) *fnv1.RunFunctionRequest {
	t.Helper()
	req := xrRequest(yamlStruct(t, xr), nil)
	req.Observed.Resources = observedFrom(t, runTest(t, req), true)
	return req
}

func setSpec(t *testing.T, req *fnv1.RunFunctionRequest, spec string) {
	t.Helper()
	setSpecOf(t, req.Observed.Composite.Resource, spec)
}

func setSpecOf(t *testing.T, xr *structpb.Struct, spec string) {
	t.Helper()
	xr.Fields["spec"] = structpb.NewStructValue(yamlStruct(t, spec))
}

func desiredSTS(t *testing.T, rsp *fnv1.RunFunctionResponse) *appsv1.StatefulSet {
	t.Helper()
	return decodeInto[appsv1.StatefulSet](t, rsp.GetDesired().GetResources()["statefulset"].GetResource())
}

func conditionOf(rsp *fnv1.RunFunctionResponse, typ string) *fnv1.Condition {
	for _, c := range rsp.GetConditions() {
		if c.GetType() == typ {
			return c
		}
	}
	return nil
}

func TestPasswordsReadBack(t *testing.T) {
	req := runningRequest(t, validXR)
	cred := decodeInto[corev1.Secret](t, req.Observed.Resources["credentials"].GetResource())
	su := decodeInto[corev1.Secret](t, req.Observed.Resources["superuser"].GetResource())
	cred.Data["password"] = []byte("app-password-the-user-set")
	su.Data["password"] = []byte("super-password-kept")
	su.Data["replication-password"] = []byte("repl-password-kept")
	req.Observed.Resources["credentials"] = encodeObserved(t, cred)
	req.Observed.Resources["superuser"] = encodeObserved(t, su)

	rsp := runTest(t, req)
	gotCred := decodeInto[corev1.Secret](t, rsp.Desired.Resources["credentials"].GetResource())
	gotSU := decodeInto[corev1.Secret](t, rsp.Desired.Resources["superuser"].GetResource())
	want := map[string]string{
		"password": "app-password-the-user-set",
		"uri":      "postgresql://orders:app-password-the-user-set@orders.shop.svc.cluster.local:5432/orders",
		"pgpass":   "orders.shop.svc.cluster.local:5432:orders:orders:app-password-the-user-set\n",
	}
	for k, v := range want {
		if got := string(gotCred.Data[k]); got != v {
			t.Errorf("credentials %s = %q, want %q", k, got, v)
		}
	}
	if string(gotSU.Data["password"]) != "super-password-kept" || string(gotSU.Data["replication-password"]) != "repl-password-kept" {
		t.Errorf("superuser passwords were regenerated: %q", gotSU.Data)
	}

}

// TestSecretsApplyOverWhatWasRead: the desired Secrets carry the
// resourceVersion of the observed ones the passwords were read from, so the
// API server refuses to apply them over an edit made after the observation
// (a password rotated while a reconcile was in flight) instead of putting the
// old password back; a Secret not observed is created unconditionally.
func TestSecretsApplyOverWhatWasRead(t *testing.T) {
	cred, sup := string(rnCredentials), string(rnSuperuser)
	cases := map[string]struct {
		deleted []string
		want    map[string]string
	}{
		"BothObserved":    {want: map[string]string{cred: "4711", sup: "4712"}},
		"CredentialsGone": {deleted: []string{cred}, want: map[string]string{cred: "", sup: "4712"}},
		"SuperuserGone":   {deleted: []string{sup}, want: map[string]string{cred: "4711", sup: ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, validXR)
			for rn, rv := range map[string]string{cred: "4711", sup: "4712"} {
				s := decodeInto[corev1.Secret](t, req.Observed.Resources[rn].GetResource())
				s.ResourceVersion = rv
				req.Observed.Resources[rn] = encodeObserved(t, s)
			}
			for _, rn := range tc.deleted {
				delete(req.Observed.Resources, rn)
			}
			rsp := runTest(t, req)
			got := map[string]string{}
			for rn := range tc.want {
				got[rn] = decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[rn].GetResource()).ResourceVersion
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("desired Secrets' resourceVersion (-want +got):\n%s", d)
			}
		})
	}
}

// TestPasswordsSurviveSecretLoss: the app password survives the deletion of
// either Secret (its copy in the superuser Secret is read back when the
// credentials Secret is gone, and the copy is written again when the
// superuser Secret is gone); the superuser and replication passwords are
// generated again when their Secret is gone (the sidecar applies them over
// peer authentication), and never copied into the Secret apps mount.
func TestPasswordsSurviveSecretLoss(t *testing.T) {
	const (
		app  = "app-password-kept"
		su   = "super-password-kept"
		repl = "repl-password-kept"
	)
	type pws struct{ App, Copy, Superuser, Replication string }
	cases := map[string]struct {
		reason  string
		deleted []string
		want    pws
	}{
		"NoneDeleted":        {"everything read back", nil, pws{app, app, su, repl}},
		"CredentialsDeleted": {"the app password comes back from its copy", []string{string(rnCredentials)}, pws{app, app, su, repl}},
		"SuperuserDeleted":   {"the app password stays and its copy is written again; the superuser's are new", []string{string(rnSuperuser)}, pws{app, app, "generated-password-01", "generated-password-02"}},
		"BothDeleted":        {"nothing left to read back: every password is new (README Known limits)", []string{string(rnCredentials), string(rnSuperuser)}, pws{"generated-password-01", "generated-password-01", "generated-password-02", "generated-password-03"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, validXR)
			cred := decodeInto[corev1.Secret](t, req.Observed.Resources[string(rnCredentials)].GetResource())
			sup := decodeInto[corev1.Secret](t, req.Observed.Resources[string(rnSuperuser)].GetResource())
			cred.Data[keyPassword] = []byte(app)
			sup.Data[keyPassword], sup.Data[keyReplicationPassword], sup.Data[keyAppPasswordCopy] = []byte(su), []byte(repl), []byte(app)
			req.Observed.Resources[string(rnCredentials)] = encodeObserved(t, cred)
			req.Observed.Resources[string(rnSuperuser)] = encodeObserved(t, sup)
			for _, rn := range tc.deleted {
				delete(req.Observed.Resources, rn)
			}
			rsp := runTest(t, req)
			gotCred := decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[string(rnCredentials)].GetResource())
			gotSU := decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[string(rnSuperuser)].GetResource())
			got := pws{string(gotCred.Data[keyPassword]), string(gotSU.Data[keyAppPasswordCopy]), string(gotSU.Data[keyPassword]), string(gotSU.Data[keyReplicationPassword])}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s: passwords (-want +got):\n%s", tc.reason, d)
			}
			if uri := string(gotCred.Data[keyURI]); !strings.Contains(uri, ":"+tc.want.App+"@") {
				t.Errorf("%s: uri %q does not carry the app password", tc.reason, uri)
			}
			for k, v := range gotCred.Data {
				if strings.Contains(string(v), got.Superuser) || strings.Contains(string(v), got.Replication) {
					t.Errorf("%s: the credentials Secret apps mount holds a superuser or replication password in %s", tc.reason, k)
				}
			}
			// Fed back as observed, nothing changes (but the readiness of the
			// Secret that was missing, and the resourceVersion it now has).
			req.Observed.Resources = observedFrom(t, rsp, true)
			second := desiredOf(runTest(t, req))
			for _, rn := range tc.deleted {
				delete(second[rn].GetResource().GetFields()["metadata"].GetStructValue().GetFields(), "resourceVersion")
			}
			if d := cmp.Diff(desiredOf(rsp), second, protocmp.Transform(), protocmp.IgnoreFields(&fnv1.Resource{}, "ready")); d != "" {
				t.Errorf("%s: the desired state churns (-first +second):\n%s", tc.reason, d)
			}
		})
	}
}

func TestPasswordsAreStrong(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		p := newPassword()
		if len(p) != passwordLength || strings.Trim(p, passwordAlphabet) != "" {
			t.Fatalf("password %q: want %d characters of the alphabet", p, passwordLength)
		}
		if seen[p] {
			t.Fatalf("password %q drawn twice", p)
		}
		seen[p] = true
	}
}

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

func TestLegacyClaim(t *testing.T) {
	rsp := runTest(t, xrRequest(readYAMLStruct(t, "example/legacy/xr.yaml"), nil))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("unexpected results: %v", rsp.GetResults())
	}
	for name, r := range rsp.Desired.Resources {
		md := r.GetResource().Fields["metadata"].GetStructValue().Fields
		if ns := md["namespace"].GetStringValue(); ns != "warehouse" {
			t.Errorf("%s: namespace %q, want the claim's namespace warehouse", name, ns)
		}
		if n := md["name"].GetStringValue(); !strings.HasPrefix(n, "inventory") || strings.Contains(n, "8k2xq") {
			t.Errorf("%s: name %q, want it named after the claim", name, n)
		}
	}
	cd := rsp.Desired.Composite.GetConnectionDetails()
	if string(cd["username"]) != "inventory" || len(cd["password"]) == 0 || !strings.HasPrefix(string(cd["uri"]), "postgresql://inventory:") {
		t.Errorf("legacy connection details: %q", cd)
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

// TestReadServiceKept: N-r exists at every size, selecting every instance
// (the primary alone with one), so scaling to one instance never deletes it
// (its clients used to get NXDOMAIN) and scaling never rewrites it.
func TestReadServiceKept(t *testing.T) {
	type got struct {
		Selector     map[string]string
		ReadEndpoint string
	}
	want := got{map[string]string{labelName: appName, labelInstance: "orders", labelComponent: componentDatabase}, "orders-r.shop.svc.cluster.local"}
	cases := map[string]struct {
		reason string
		from   string // the spec the Database runs with; empty: a new Database
		spec   string
	}{
		"NewSmall":     {"a new one-instance Database", "", `{version: "16", size: small}`},
		"MediumToOne":  {"scaling to one instance keeps N-r", `{version: "16", size: medium}`, `{version: "16", size: small}`},
		"SmallToLarge": {"scaling out keeps the same Service", `{version: "16", size: small}`, `{version: "16", size: large}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := xrRequest(yamlStruct(t, validXR), nil)
			if tc.from != "" {
				setSpec(t, req, tc.from)
				req.Observed.Resources = observedFrom(t, runTest(t, req), true)
			}
			setSpec(t, req, tc.spec)
			rsp := runTest(t, req)
			svc := rsp.GetDesired().GetResources()[string(rnServiceRead)]
			if svc == nil {
				t.Fatalf("%s: no Service %s composed", tc.reason, readServiceName(&database{Name: "orders"}))
			}
			// The status follows the observed Service: feed the response back.
			req.Observed.Resources = observedFrom(t, rsp, true)
			rsp = runTest(t, req)
			g := got{
				Selector:     decodeInto[corev1.Service](t, svc.GetResource()).Spec.Selector,
				ReadEndpoint: rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["readEndpoint"].GetStringValue(),
			}
			if d := cmp.Diff(want, g); d != "" {
				t.Errorf("%s: read Service (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

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

// TestBackupRunsBounded: a backup run cannot hang forever. pg_dump gives up
// on a lock it waits for, the Job has a deadline (retries included) and the
// CronJob a starting deadline; a run stopped at its deadline empties the
// CronJob's active list, and BackupHealthy turns False saying so (it used to
// stay Unknown "running" for as long as the dump hung, every later run
// skipped by concurrencyPolicy Forbid).
func TestBackupRunsBounded(t *testing.T) {
	if d, err := time.ParseDuration(backupDeadlineText); err != nil || d != backupDeadline {
		t.Fatalf("backupDeadlineText %q is not backupDeadline %v", backupDeadlineText, backupDeadline)
	}
	if !strings.Contains(scriptFiles[scripts.Backup], `pg_dump --format=custom --no-password --lock-wait-timeout=`) {
		t.Errorf("backup.sh runs pg_dump without --lock-wait-timeout: a dump behind an exclusive lock waits forever")
	}
	type bounds struct {
		Concurrency                batchv1.ConcurrencyPolicy
		StartingDeadline, Deadline *int64
		BackoffLimit               *int32
	}
	const backups = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"16\", size: medium, backup: {enabled: true}}"
	cases := map[string]struct {
		reason string
		status batchv1.CronJobStatus
		want   *fnv1.Condition
	}{
		"Hung": {"a run still active: Unknown, saying it is bounded",
			batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "orders-backup-29411640"}}, LastScheduleTime: at(t, "2026-11-29T02:00:00Z"), LastSuccessfulTime: at(t, "2026-11-28T02:03:12Z")},
			&fnv1.Condition{Type: condBackupHealthy, Status: fnv1.Status_STATUS_CONDITION_UNKNOWN, Reason: "BackupRunning", Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum(),
				Message: ptr.To("a backup scheduled at 2026-11-29T02:00:00Z is running; a run not done within 6h is stopped and reported failed")}},
		"PastDeadline": {"the run was stopped at its deadline: the active list is empty and nothing succeeded since",
			batchv1.CronJobStatus{LastScheduleTime: at(t, "2026-11-29T02:00:00Z"), LastSuccessfulTime: at(t, "2026-11-28T02:03:12Z")},
			&fnv1.Condition{Type: condBackupHealthy, Status: fnv1.Status_STATUS_CONDITION_FALSE, Reason: "BackupFailed", Target: fnv1.Target_TARGET_COMPOSITE_AND_CLAIM.Enum(),
				Message: ptr.To("the backup scheduled at 2026-11-29T02:00:00Z did not succeed: it failed or ran past its 6h bound (the Job's Failed condition says which: BackoffLimitExceeded or DeadlineExceeded); last success at 2026-11-28T02:03:12Z; see the jobs of CronJob orders-backup")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, backups)
			cj := decodeInto[batchv1.CronJob](t, req.Observed.Resources[string(rnBackup)].GetResource())
			cj.Status = tc.status
			req.Observed.Resources[string(rnBackup)] = encodeObserved(t, cj)
			rsp := runTest(t, req)
			got := decodeInto[batchv1.CronJob](t, rsp.GetDesired().GetResources()[string(rnBackup)].GetResource())
			want := bounds{batchv1.ForbidConcurrent, ptr.To[int64](3600), ptr.To[int64](6 * 3600), ptr.To[int32](2)}
			if d := cmp.Diff(want, bounds{got.Spec.ConcurrencyPolicy, got.Spec.StartingDeadlineSeconds, got.Spec.JobTemplate.Spec.ActiveDeadlineSeconds, got.Spec.JobTemplate.Spec.BackoffLimit}); d != "" {
				t.Errorf("backup run bounds (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.want, conditionOf(rsp, condBackupHealthy), protocmp.Transform()); d != "" {
				t.Errorf("%s: BackupHealthy (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

func at(t *testing.T, s string) *metav1.Time {
	t.Helper()
	tm, err := time3339(s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
