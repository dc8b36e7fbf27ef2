package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// Fuzzing (issue 5). In CI, each target runs briefly:
//
//	go test -run='^$' -fuzz='^FuzzRunFunction$' -fuzztime=20s .
//	go test -run='^$' -fuzz='^FuzzParseSpec$' -fuzztime=20s .
//
// Without -fuzz, `go test` runs every seed below and every input saved in
// testdata/fuzz/ (the crashers found so far) as ordinary tests.

// fuzzHangTimeout is how long one RunFunction may take before the fuzz
// target reports a hang. A real request takes milliseconds; the margin is for
// the race detector and busy machines.
const fuzzHangTimeout = 10 * time.Second

// fuzzPassword is the password of every generated Secret while fuzzing:
// constant, so that running one request twice must give the same bytes, and
// safe for concurrent use.
const fuzzPassword = "fuzzpassword0123456789abcdefghij"

func fuzzFunction() *Function {
	f := NewFunction(logging.NewNopLogger())
	f.password = func() string { return fuzzPassword }
	return f
}

// FuzzRunFunction feeds RunFunction arbitrary XRs, observed composed
// resources and inputs, each as JSON. Whatever comes in, RunFunction must
// return without a panic (recovered panics are answered with "internal
// error", which is a bug) or a hang, and answer either with a Fatal result
// that says why, or with a desired state every resource of which decodes
// strictly as its Kubernetes kind, with legal names and the pod security
// the function promises. The same request must give the same bytes.
func FuzzRunFunction(f *testing.F) {
	for _, s := range runFunctionSeeds(f) {
		f.Add(s.xr, s.observed, s.input)
	}
	f.Fuzz(func(t *testing.T, xr, observed, input []byte) {
		req, ok := fuzzRequest(xr, observed, input)
		if !ok {
			return // not JSON objects: nothing Crossplane could send
		}
		fn := fuzzFunction()
		rsp := runWithin(t, fn, proto.CloneOf(req))
		for _, p := range responseProblems(req, rsp) {
			t.Error(p)
		}
		again := runWithin(t, fn, proto.CloneOf(req))
		if !proto.Equal(rsp, again) {
			t.Errorf("the same request gave two different responses (-first +second):\n%s", cmp.Diff(rsp, again, protocmp.Transform()))
		}
	})
}

// FuzzParseSpec feeds parseDatabase arbitrary spec JSON under a valid
// namespaced XR: it must not panic or hang, and either report errors with a
// field path, or return a Database whose every value is within the API's
// bounds.
func FuzzParseSpec(f *testing.F) {
	for _, s := range specSeeds(f) {
		f.Add(s)
	}
	cfg, errs := parseInput(nil)
	if len(errs) > 0 {
		f.Fatalf("the built-in configuration is invalid: %v", errs)
	}
	f.Fuzz(func(t *testing.T, spec []byte) {
		var v any
		if err := json.Unmarshal(spec, &v); err != nil {
			return
		}
		sv, err := structpb.NewValue(v)
		if err != nil {
			return
		}
		xr := &structpb.Struct{Fields: map[string]*structpb.Value{
			"apiVersion": structpb.NewStringValue("example.com/v1"),
			"kind":       structpb.NewStringValue("Database"),
			"metadata": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"name":      structpb.NewStringValue("orders"),
				"namespace": structpb.NewStringValue("shop"),
			}}),
			"spec": sv,
		}}
		var (
			db   *database
			errs []string
		)
		within(t, "parseDatabase", func() {
			d, fe := parseDatabase(xr, cfg)
			db = d
			for _, e := range fe {
				if e == nil {
					errs = append(errs, "<nil error>")
					continue
				}
				if e.Error() == "" || !strings.HasPrefix(e.Field, "spec") {
					errs = append(errs, fmt.Sprintf("an error without a message or outside spec: field %q: %q", e.Field, e.Error()))
				}
			}
			if len(fe) == 0 {
				errs = append(errs, databaseProblems(db, v)...)
			}
		})
		for _, e := range errs {
			t.Error(e)
		}
	})
}

// databaseProblems checks a parsed Database against the API's bounds.
func databaseProblems(db *database, spec any) []string {
	if db == nil {
		return []string{"parseDatabase returned neither errors nor a Database"}
	}
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if _, ok := lookupMajor(db.Version.Major); !ok {
		bad("major %d outside the version table", db.Version.Major)
	}
	// encoding/json matches keys case-insensitively: compare only when
	// "version" is the one key that can set the version.
	if m, _ := spec.(map[string]any); m != nil {
		n := 0
		for k := range m {
			if strings.EqualFold(k, "version") {
				n++
			}
		}
		if _, exact := m["version"]; exact && n == 1 && m["version"] != db.Version.Tag {
			bad("image tag %q is not spec.version %v", db.Version.Tag, m["version"])
		}
	}
	if _, ok := map[string]bool{sizeSmall: true, sizeMedium: true, sizeLarge: true}[db.Size]; !ok {
		bad("size %q accepted", db.Size)
	}
	if db.Tier.Replicas < 1 {
		bad("%d replicas", db.Tier.Replicas)
	}
	if db.Storage.Sign() <= 0 || db.Backup.Storage.Sign() <= 0 {
		bad("storage %s, backup storage %s: not positive", db.Storage.String(), db.Backup.Storage.String())
	}
	if db.Backup.Retention < 1 || db.Backup.Retention > maxRetention {
		bad("retention %d accepted", db.Backup.Retention)
	}
	if _, err := cronParser.Parse(db.Backup.Schedule); err != nil {
		bad("schedule %q accepted: %v", db.Backup.Schedule, err)
	}
	if db.DeletionPolicy != deletionRetain && db.DeletionPolicy != deletionDelete {
		bad("deletionPolicy %q accepted", db.DeletionPolicy)
	}
	if r := db.RestoreFrom; r != nil {
		if len(validateName(field.NewPath("spec", "restoreFrom", "database"), r.Database)) > 0 || r.Database == db.Name || !backupPattern.MatchString(r.Backup) || r.Attempt < 0 || r.Attempt > maxRestoreAttempt {
			bad("restoreFrom %+v accepted", *r)
		}
	}
	return out
}

// within runs fn, failing t if it does not return within fuzzHangTimeout.
// A hung fn keeps running in the background: Go cannot stop a goroutine.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	timer := time.NewTimer(fuzzHangTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s did not return within %s: a hang", what, fuzzHangTimeout)
	}
}

// runWithin runs one request, failing t on a Go error or a hang.
func runWithin(t *testing.T, f *Function, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	var (
		rsp *fnv1.RunFunctionResponse
		err error
	)
	within(t, "RunFunction", func() { rsp, err = f.RunFunction(context.Background(), req) })
	if err != nil {
		t.Fatalf("RunFunction returned a Go error (a bad request must be a Fatal result): %v", err)
	}
	if rsp == nil {
		t.Fatal("RunFunction returned no response and no error")
	}
	return overTheWire(t, rsp)
}

// fuzzRequest builds a request from the JSON of an XR (empty: none), of a
// map of observed composed resources by name (a non-object entry is a
// resource without a body), and of an input (empty: none).
func fuzzRequest(xr, observed, input []byte) (*fnv1.RunFunctionRequest, bool) {
	req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{}}
	if len(xr) > 0 {
		s, ok := jsonStruct(xr)
		if !ok {
			return nil, false
		}
		req.Observed.Composite = &fnv1.Resource{Resource: s}
	}
	if len(observed) > 0 {
		var m map[string]any
		if err := json.Unmarshal(observed, &m); err != nil {
			return nil, false
		}
		req.Observed.Resources = make(map[string]*fnv1.Resource, len(m))
		for name, v := range m {
			r := &fnv1.Resource{}
			if o, ok := v.(map[string]any); ok {
				s, err := structpb.NewStruct(o)
				if err != nil {
					return nil, false
				}
				r.Resource = s
			}
			req.Observed.Resources[name] = r
		}
	}
	if len(input) > 0 {
		s, ok := jsonStruct(input)
		if !ok {
			return nil, false
		}
		req.Input = s
	}
	return req, true
}

func jsonStruct(b []byte) (*structpb.Struct, bool) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, false
	}
	s, err := structpb.NewStruct(m)
	return s, err == nil
}

// composedKinds is the kind of every composition resource name the
// function may emit (docs/composed.md, "What gets composed"), as apiVersion/kind.
var composedKinds = map[resource.Name]string{
	rnCredentials:     "v1/Secret",
	rnSuperuser:       "v1/Secret",
	rnObjectStorage:   "v1/Secret",
	rnScripts:         "v1/ConfigMap",
	rnStatefulSet:     "apps/v1/StatefulSet",
	rnService:         "v1/Service",
	rnServiceRead:     "v1/Service",
	rnServiceHeadless: "v1/Service",
	rnPDB:             "policy/v1/PodDisruptionBudget",
	rnNetworkPolicy:   "networking.k8s.io/v1/NetworkPolicy",
	rnBackup:          "batch/v1/CronJob",
	rnArchiveCheck:    "batch/v1/CronJob",
	rnDrill:           "batch/v1/CronJob",
	rnFullBackup:      "batch/v1/CronJob",
	rnRestore:         "batch/v1/Job",
	rnFailover:        "batch/v1/Job",
	rnPodMonitor:      "monitoring.coreos.com/v1/PodMonitor",
	rnPrometheusRule:  "monitoring.coreos.com/v1/PrometheusRule",
}

// typedKinds makes an empty object of each kind the function composes.
var typedKinds = map[string]func() any{
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"batch/v1/CronJob":                        func() any { return &batchv1.CronJob{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &monitoringv1.PodMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
}

func apiVersionKind(s *structpb.Struct) string {
	return s.GetFields()["apiVersion"].GetStringValue() + "/" + s.GetFields()["kind"].GetStringValue()
}

// decodeTyped decodes a desired composed resource into its Kubernetes type
// by apiVersion and kind, refusing unknown fields and wrong types: what the
// API server would refuse (or silently drop) is a bug of the function.
func decodeTyped(s *structpb.Struct) (any, error) {
	gvk := apiVersionKind(s)
	newObj, ok := typedKinds[gvk]
	if !ok {
		return nil, fmt.Errorf("unexpected apiVersion/kind %q", gvk)
	}
	b, err := s.MarshalJSON()
	if err != nil {
		return nil, err
	}
	obj := newObj()
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(obj); err != nil {
		return nil, fmt.Errorf("does not decode strictly as %s: %w", gvk, err)
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after %s", gvk)
	}
	return obj, nil
}

// responseProblems checks a response against the invariants of every
// response: a Fatal result that says why (and is not a recovered panic), or
// a desired state Kubernetes would accept as is.
func responseProblems(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	fatal := false
	for _, r := range rsp.GetResults() {
		if r.GetMessage() == "" {
			bad("a %s result without a message", r.GetSeverity())
		}
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			fatal = true
			if strings.Contains(r.GetMessage(), "internal error") {
				bad("a recovered panic: %s", r.GetMessage())
			}
		}
	}
	if fatal {
		return out
	}
	if req.GetObserved().GetComposite().GetResource() == nil {
		bad("no observed XR, yet no Fatal result")
	}
	// The function writes the XR's status only: never its spec or metadata.
	for k := range rsp.GetDesired().GetComposite().GetResource().GetFields() {
		if k != "apiVersion" && k != "kind" && k != "status" {
			bad("the desired XR sets %q; the function owns only its status", k)
		}
	}
	if len(rsp.GetDesired().GetResources()) == 0 {
		bad("no Fatal result, yet no desired composed resources")
	}
	for name, r := range rsp.GetDesired().GetResources() {
		want, ok := composedKinds[resource.Name(name)]
		if !ok {
			bad("desired composed resource %q: not a composition resource name of the contract", name)
			continue
		}
		s := r.GetResource()
		if got := apiVersionKind(s); got != want {
			bad("desired composed resource %q is %s, want %s", name, got, want)
			continue
		}
		obj, err := decodeTyped(s)
		if err != nil {
			bad("desired composed resource %q %v", name, err)
			continue
		}
		for _, p := range objectProblems(obj) {
			bad("desired composed resource %q: %s", name, p)
		}
	}
	return out
}

// objectProblems checks what the API server would refuse in any composed
// object (names, namespace, labels) and the pod security every pod of the
// function has, whatever the request.
func objectProblems(obj any) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	meta := objectMeta(obj)
	nameErrs := validation.IsDNS1123Subdomain(meta.Name)
	switch o := obj.(type) {
	case *corev1.Service:
		nameErrs = validation.IsDNS1035Label(meta.Name)
	case *batchv1.CronJob:
		if len(meta.Name) > 52 {
			nameErrs = append(nameErrs, "a CronJob name must be at most 52 characters")
		}
	case *appsv1.StatefulSet:
		// Its pods are named N-<ordinal> and labelled with N-<revision hash>.
		nameErrs = append(nameErrs, validation.IsDNS1123Label(meta.Name+"-0123456789")...)
		out = append(out, labelProblems("spec.template.metadata.labels", o.Spec.Template.Labels)...)
	}
	for _, e := range nameErrs {
		bad("metadata.name %q: %s", meta.Name, e)
	}
	for _, e := range validation.IsDNS1123Label(meta.Namespace) {
		bad("metadata.namespace %q: %s", meta.Namespace, e)
	}
	out = append(out, labelProblems("metadata.labels", meta.Labels)...)
	if spec := podSpecOf(obj); spec != nil {
		out = append(out, podSecurityProblems(spec)...)
	}
	return out
}

func labelProblems(path string, l map[string]string) []string {
	var out []string
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			out = append(out, fmt.Sprintf("%s key %q: %s", path, k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			out = append(out, fmt.Sprintf("%s[%q] %q: %s", path, k, v, e))
		}
	}
	return out
}

// runFunctionSeed is one seed of FuzzRunFunction, as JSON.
type runFunctionSeed struct {
	xr, observed, input []byte
}

// allExamples lists the example XRs as examples(t) does, for a testing.TB.
func allExamples(tb testing.TB) []example {
	tb.Helper()
	out := []example{{"medium", "example/xr.yaml", "example/composition.yaml"}}
	files, err := filepath.Glob("example/xrs/*.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(files)
	for _, f := range files {
		out = append(out, example{strings.TrimSuffix(filepath.Base(f), ".yaml"), f, "example/composition.yaml"})
	}
	return append(out,
		example{"legacy", "example/legacy/xr.yaml", "example/legacy/composition.yaml"},
		example{"archive", "example/archive/xr.yaml", "example/archive/composition.yaml"})
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	if v == nil {
		return nil
	}
	if m, ok := v.(proto.Message); ok {
		b, err := protoJSON(m)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func protoJSON(m proto.Message) ([]byte, error) {
	switch x := m.(type) {
	case *structpb.Struct:
		if x == nil {
			return nil, nil
		}
		return x.MarshalJSON()
	default:
		return nil, fmt.Errorf("cannot marshal %T", m)
	}
}

// observedJSON is observed composed resources as FuzzRunFunction takes
// them: one JSON object, by composition resource name.
func observedJSON(tb testing.TB, rs map[string]*fnv1.Resource) []byte {
	tb.Helper()
	m := make(map[string]any, len(rs))
	for k, r := range rs {
		m[k] = r.GetResource().AsMap()
	}
	return mustJSON(tb, m)
}

// goldenObserved reads example/observed/: the running medium Database as
// `crossplane composition render -o` takes it.
func goldenObserved(tb testing.TB) map[string]any {
	tb.Helper()
	files, err := filepath.Glob("example/observed/*.yaml")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no example/observed/*.yaml: %v", err)
	}
	out := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(b, &m); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = m
	}
	return out
}

// deleted marks a field to remove in withChanges.
type deletedField struct{}

var deleted = deletedField{}

// withChanges returns a deep copy of the JSON object b with the value at
// each dotted path set (or deleted).
func withChanges(tb testing.TB, b []byte, changes map[string]any) []byte {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		tb.Fatal(err)
	}
	for path, v := range changes {
		keys := strings.Split(path, ".")
		cur := m
		for _, k := range keys[:len(keys)-1] {
			next, ok := cur[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[k] = next
			}
			cur = next
		}
		last := keys[len(keys)-1]
		if v == deleted {
			delete(cur, last)
			continue
		}
		cur[last] = v
	}
	return mustJSON(tb, m)
}

func runFunctionSeeds(tb testing.TB) []runFunctionSeed {
	tb.Helper()
	var out []runFunctionSeed
	for _, ex := range allExamples(tb) {
		xr := readYAMLStruct(tb, ex.xr)
		in := compositionInput(tb, ex.composition)
		first := runTest(tb, xrRequest(xr, in))
		xrJ, inJ := mustJSON(tb, xr), mustJSON(tb, in)
		out = append(out,
			runFunctionSeed{xrJ, nil, inJ},
			runFunctionSeed{xrJ, nil, nil},
			runFunctionSeed{xrJ, observedJSON(tb, observedFrom(tb, first, false)), inJ},
			runFunctionSeed{xrJ, observedJSON(tb, observedFrom(tb, first, true)), inJ},
		)
	}

	medium := mustJSON(tb, readYAMLStruct(tb, "example/xr.yaml"))
	input := mustJSON(tb, compositionInput(tb, "example/composition.yaml"))
	golden := goldenObserved(tb)
	running := mustJSON(tb, golden)
	out = append(out, runFunctionSeed{medium, running, input})

	// Malformed and edge-case XRs, new and running.
	for _, c := range []map[string]any{
		{"spec": deleted},
		{"spec": "a string"},
		{"spec": []any{1, 2}},
		{"spec.version": 16},
		{"spec.version": "13"},
		{"spec.version": "19"},
		{"spec.version": "16.04"},
		{"spec.version": "17"},
		{"spec.version": "15"},
		{"spec.version": ""},
		{"spec.size": "huge"},
		{"spec.size": 3},
		{"spec.storage.size": "-1Gi"},
		{"spec.storage.size": "1Gi"},
		{"spec.storage.size": "100Gi"},
		{"spec.storage.size": "1e-9"},
		{"spec.storage.size": "20Gx"},
		{"spec.storage.storageClassName": "Bad_Class"},
		{"spec.storage.storageClassName": "fast"},
		{"spec.storage": "big"},
		{"spec.backup.enabled": "yes"},
		{"spec.backup.schedule": "@every 1h"},
		{"spec.backup_enabled": true, "spec.backup_schedule": "0 2 * * *"},
		{"spec.backup_enabled": true, "spec.backup.enabled": false},
		{"spec.backup_schedule": "0 3 * * *", "spec.backup.schedule": "0 2 * * *"},
		{"spec.backup_enabled": "yes"},
		{"spec.backup.schedule": "61 * * * *"},
		{"spec.backup.schedule": "CRON_TZ=UTC 0 2 * * *"},
		{"spec.backup.retention": 0},
		{"spec.backup.retention": 1.5},
		{"spec.backup.retention": 1e9},
		{"spec.backup.storage": "1Ei"},
		{"spec.deletionPolicy": "Orphan"},
		{"spec.deletionPolicy": "Delete"},
		{"spec.restoreFrom.database": "orders"},
		{"spec.restoreFrom.database": ""},
		{"spec.restoreFrom.database": "orders-old", "spec.restoreFrom.backup": "../../etc/passwd"},
		{"spec.restoreFrom.database": "orders-old", "spec.restoreFrom.attempt": 3},
		{"spec.restoreFrom.database": "orders-old", "status.restore.completed": true, "status.restore.completionTime": "2026-11-28T03:00:00Z"},
		{"spec.restoreFrom": "orders-old"},
		{"metadata.name": strings.Repeat("a", 46)},
		{"metadata.name": "Orders"},
		{"metadata.namespace": deleted},
		{"metadata.namespace": deleted, "metadata.labels": map[string]any{labelClaimName: "orders", labelClaimNamespace: "shop"}},
		{"metadata.namespace": deleted, "metadata.labels": map[string]any{labelClaimName: "-bad-", labelClaimNamespace: "shop"}},
		{"metadata": "x"},
	} {
		xr := withChanges(tb, medium, c)
		out = append(out, runFunctionSeed{xr, nil, input}, runFunctionSeed{xr, running, input})
	}

	// Observed states a cluster could show: edited, broken or foreign.
	for _, c := range []map[string]any{
		{"statefulset.spec.template.spec.containers": []any{map[string]any{"name": "postgres", "image": "postgres"}}},
		{"statefulset.spec.template.spec.containers": []any{map[string]any{"name": "postgres", "image": "postgres:abc"}}},
		{"statefulset.metadata.annotations": map[string]any{annotationMajor: "abc"}},
		{"statefulset.metadata.annotations": map[string]any{annotationMajor: "15"}},
		{"statefulset.spec.volumeClaimTemplates": deleted},
		{"statefulset.spec.volumeClaimTemplates": []any{}},
		{"statefulset.spec.volumeClaimTemplates": []any{map[string]any{"metadata": map[string]any{"name": "data"}}}},
		{"statefulset.spec.replicas": "two"},
		{"statefulset.status.readyReplicas": 0},
		{"statefulset.status": deleted},
		{"statefulset": deleted},
		{"statefulset": "not an object"},
		{"credentials.data.password": "not base64!"},
		{"credentials.data": deleted},
		{"superuser.data.password": ""},
		{"scripts.data.initialized": "true"},
		{"scripts.data": deleted},
		{"backup.status": map[string]any{"lastScheduleTime": "2026-11-29T02:00:00Z"}},
		{"backup.status": map[string]any{"lastScheduleTime": "yesterday"}},
		{"restore": map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": "orders-restore"}, "status": map[string]any{"failed": 3}}},
		{"junk": map[string]any{"apiVersion": "v1", "kind": "Pod"}},
	} {
		out = append(out, runFunctionSeed{medium, withChanges(tb, running, c), input})
	}

	// Inputs the platform team could write.
	for _, c := range []map[string]any{
		{"unknownField": true},
		{"kind": "Other"},
		{"apiVersion": "database.fn.example.com/v2"},
		{"image": "postgres:latest"},
		{"image": "registry.example.com:5000/mirror/postgres"},
		{"image": "Postgres"},
		{"clusterDomain": "Bad..Domain"},
		{"storageClassName": "fast"},
		{"networkPolicy": map[string]any{"enabled": false}},
		{"networkPolicy": map[string]any{"allowedNamespaces": []any{"monitoring", "monitoring", "Bad_NS"}}},
		{"tiers.small": map[string]any{"replicas": 0}},
		{"tiers.medium": map[string]any{"replicas": -1}},
		{"tiers.medium": map[string]any{"replicas": 5, "cpu": "abc", "memory": "1e-9"}},
		{"tiers.medium": map[string]any{"settings": map[string]any{"max_connections": "100\nssl = off"}}},
		{"tiers.medium": map[string]any{"settings": map[string]any{"bad name": "1"}}},
		{"tiers.huge": map[string]any{"replicas": 9}},
	} {
		out = append(out, runFunctionSeed{medium, nil, withChanges(tb, input, c)})
	}

	// Not what Crossplane sends at all.
	out = append(out,
		runFunctionSeed{nil, nil, nil},
		runFunctionSeed{nil, running, input},
		runFunctionSeed{[]byte(`{}`), nil, nil},
		runFunctionSeed{[]byte(`{"spec":`), nil, nil},
		runFunctionSeed{[]byte(`null`), []byte(`null`), []byte(`null`)},
		runFunctionSeed{medium, []byte(`{"statefulset":null,"credentials":1}`), []byte(`{}`)},
	)
	return out
}

func specSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, ex := range allExamples(tb) {
		out = append(out, mustJSON(tb, readYAMLStruct(tb, ex.xr).GetFields()["spec"].GetStructValue()))
	}
	base := out[0]
	for _, c := range []map[string]any{
		{"version": "16.4"},
		{"version": "016"},
		{"version": "1e1"},
		{"storage": map[string]any{"size": "1e-9", "storageClassName": "standard"}},
		{"storage": map[string]any{"size": "0.5Gi"}},
		{"storage": map[string]any{"size": "20Gi", "storageClassName": strings.Repeat("a", 254)}},
		{"backup": map[string]any{"enabled": true, "schedule": "@daily", "retention": 1000, "storage": "1Ti"}},
		{"backup": map[string]any{"enabled": true, "schedule": "0 2 * * * *", "retention": 1001}},
		{"backup": map[string]any{"retention": -5, "storage": "0"}},
		{"deletionPolicy": "retain"},
		{"restoreFrom": map[string]any{"database": "orders-old", "backup": "orders-20261128T020000Z.dump"}},
		{"restoreFrom": map[string]any{"database": "Orders_Old"}},
	} {
		out = append(out, withChanges(tb, base, c))
	}
	return append(out, []byte(`{}`), []byte(`null`), []byte(`"16"`), []byte(`{"version":"16","size":"small","backup":null}`))
}
