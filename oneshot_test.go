package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

func TestStageOf(t *testing.T) {
	running := &batchv1.Job{}
	done := &batchv1.Job{Status: *jobComplete}
	failed := &batchv1.Job{Status: *jobBackoff}
	cases := map[string]struct {
		job                *batchv1.Job
		recorded, reported bool
		want               jobStage
	}{
		"None":               {want: stageAbsent, reported: true},
		"RecordedWithoutJob": {recorded: true, want: stageRecorded},
		"RecordedWins":       {job: failed, recorded: true, reported: true, want: stageRecorded},
		"Running":            {job: running, want: stageRunning},
		"DoneNotRead":        {job: done, want: stageReading},
		"Done":               {job: done, reported: true, want: stageSucceeded},
		"FailedNotRead":      {job: failed, want: stageFailed},
		"Failed":             {job: failed, reported: true, want: stageFailed},
	}
	for name, tc := range cases {
		if got := stageOf(tc.job, tc.recorded, tc.reported); got != tc.want {
			t.Errorf("%s: stage %d, want %d", name, got, tc.want)
		}
	}
}

func TestJobReadBack(t *testing.T) {
	j := &batchv1.Job{}
	j.Spec.Template.Spec.Containers = []corev1.Container{
		{Name: "side", Image: "side:1", Env: []corev1.EnvVar{{Name: "A", Value: "side"}}},
		{Name: "main", Image: "main:1", Env: []corev1.EnvVar{
			{Name: "S", ValueFrom: &corev1.EnvVarSource{}}, {Name: "B", Value: "b"},
		}},
	}
	j.Status = *jobFailedWith(batchv1.JobReasonPodFailurePolicy, "Container restore for pod shop/x failed with exit code 4 matching FailJob rule at index 1")
	if got := frozenImage(j, "main", "fallback"); got != "main:1" {
		t.Errorf("frozenImage(main) = %q", got)
	}
	if got := frozenImage(j, "", "fallback"); got != "side:1" {
		t.Errorf("frozenImage(any) = %q", got)
	}
	if got := frozenImage(j, "gone", "fallback"); got != "fallback" {
		t.Errorf("frozenImage(gone) = %q", got)
	}
	if v, ok := frozenEnv(j, "B"); !ok || v != "b" {
		t.Errorf("frozenEnv(B) = %q, %v", v, ok)
	}
	if _, ok := frozenEnv(j, "S"); ok {
		t.Error("frozenEnv read a value from a reference as if literal")
	}
	if d := cmp.Diff(j.Spec.Template.Spec.Containers[1].Env, frozenContainerEnv(j, "main")); d != "" {
		t.Errorf("frozenContainerEnv (-want +got):\n%s", d)
	}
	if frozenContainerEnv(j, "gone") != nil {
		t.Error("frozenContainerEnv of no such container is not nil")
	}
	if got := jobExitCode(j); got != 4 {
		t.Errorf("jobExitCode = %d, want 4", got)
	}
	j.Status = *jobFailedWith(batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")
	if got := jobExitCode(j); got != 0 {
		t.Errorf("jobExitCode of a deadline = %d, want 0", got)
	}
}

// oneShotKind is one one-shot Job in TestOneShotChecklist: how a request
// gets it composed, how the world moves on while it runs, and where its
// outcome appears.
type oneShotKind struct {
	builder   string        // the function that calls oneShotJob
	rn        resource.Name // its composition resource name
	container string
	// start is a request and the cluster whose response composes the Job.
	start func(t *testing.T) (*fnv1.RunFunctionRequest, []*structpb.Struct)
	// change moves the world on while the Job runs (the spec, the input,
	// the pods): none of it may reach the Job's template. It returns the
	// cluster of the next reconcile.
	change func(t *testing.T, req *fnv1.RunFunctionRequest) []*structpb.Struct
	// done is the cluster once the Job succeeded and reported its outcome.
	done func(t *testing.T, req *fnv1.RunFunctionRequest) []*structpb.Struct
}

// oneShotKinds are every one-shot Job kind (TestOneShotChecklist fails
// for a builder that calls oneShotJob and is not here).
func oneShotKinds() []oneShotKind {
	withCluster := func(extra ...*structpb.Struct) []*structpb.Struct {
		return append(slices.Clip(exampleClusterObjs), extra...)
	}
	return []oneShotKind{
		{
			builder: "restoreJob", rn: rnRestore, container: containerRestore,
			start: func(t *testing.T) (*fnv1.RunFunctionRequest, []*structpb.Struct) {
				return xrRequest(yamlStruct(t, restoringXR), compositionInput(t, "example/composition.yaml")), exampleCluster(t)
			},
			change: func(t *testing.T, req *fnv1.RunFunctionRequest) []*structpb.Struct {
				// A minor roll and another image in the input; the source
				// deleted.
				setSpecField(req, "version", structpb.NewStringValue("17.2"))
				req.Input.Fields["image"] = structpb.NewStringValue("registry.example.com/mirror/postgres")
				return []*structpb.Struct{}
			},
			done: func(t *testing.T, _ *fnv1.RunFunctionRequest) []*structpb.Struct { return exampleCluster(t) },
		},
		{
			builder: "failoverJob", rn: rnFailover, container: containerFailover,
			start: func(t *testing.T) (*fnv1.RunFunctionRequest, []*structpb.Struct) {
				exampleCluster(t)
				return largeSteady(t), withCluster(instancePodsReady(t, false, true, true)...)
			},
			change: func(t *testing.T, req *fnv1.RunFunctionRequest) []*structpb.Struct {
				// A smaller size (the primary, 0, stays an instance), sync
				// durability, another grace and image; a standby unready.
				setSpecField(req, "size", structpb.NewStringValue("medium"))
				setSpecField(req, "durability", structpb.NewStringValue("sync"))
				req.Input.Fields["image"] = structpb.NewStringValue("registry.example.com/mirror/postgres")
				req.Input.Fields["failover"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"graceSeconds": structpb.NewNumberValue(45)}})
				return withCluster(instancePodsReady(t, false, false, true)...)
			},
			done: func(t *testing.T, req *fnv1.RunFunctionRequest) []*structpb.Struct {
				return withCluster(append(instancePodsReady(t, true, true, true),
					failoverJobPod(t, req, `{"result":"promoted","from":0,"to":2,"timeline":2,"lsn":"0/5000060"}`))...)
			},
		},
	}
}

// TestOneShotChecklist is the test of docs/maintainers.md's checklist "How
// to add a one-shot Job": every Job is built by oneShotJob (oneshot.go), by
// a builder listed in oneShotKinds, and lives the one-shot life: bounded
// and run once, ready by its readiness rule once it succeeded, composed
// frozen while it runs whatever changes, and dropped once its outcome is
// recorded.
func TestOneShotChecklist(t *testing.T) {
	builders := oneShotBuilders(t)
	kinds := oneShotKinds()
	var listed []string
	for _, k := range kinds {
		listed = append(listed, k.builder)
	}
	if d := cmp.Diff(builders, slices.Sorted(slices.Values(listed))); d != "" {
		t.Errorf("the builders that call oneShotJob are not those listed in oneShotKinds: add the new kind there (-calling +listed):\n%s", d)
	}
	for _, k := range kinds {
		t.Run(k.builder, func(t *testing.T) {
			if readiness[k.rn] == nil {
				t.Errorf("%s has no readiness rule in ready.go", k.rn)
			}
			req, cluster := k.start(t)
			rsp := runTestIn(t, req, cluster)
			first := rsp.GetDesired().GetResources()[string(k.rn)]
			if first == nil {
				t.Fatalf("%s is not composed by its start request", k.rn)
			}
			j := decodeInto[batchv1.Job](t, first.GetResource())
			pod := j.Spec.Template
			switch {
			case pod.Spec.RestartPolicy != corev1.RestartPolicyNever:
				t.Errorf("restartPolicy %q: a one-shot Job runs once", pod.Spec.RestartPolicy)
			case j.Spec.ActiveDeadlineSeconds == nil || *j.Spec.ActiveDeadlineSeconds <= 0:
				t.Error("no activeDeadlineSeconds: a Job pending or hung must end")
			case j.Spec.BackoffLimit == nil:
				t.Error("no backoffLimit: the retries must be the kind's choice")
			case j.Labels[labelComponent] == "" || pod.Labels[labelComponent] != j.Labels[labelComponent]:
				t.Errorf("component labels %q (Job) and %q (pod): equal and set", j.Labels[labelComponent], pod.Labels[labelComponent])
			case len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != k.container:
				t.Errorf("containers %v, want one named %s", pod.Spec.Containers, k.container)
			}
			if got := readiness[k.rn](k.rn, &observed{}, 0); got {
				t.Errorf("%s is ready before it is observed", k.rn)
			}

			// Frozen: created, running, then the world moves on.
			feedBack(t, req, rsp, false)
			next := runTestIn(t, req, k.change(t, req))
			if d := diffProto(map[string]*fnv1.Resource{"job": first}, map[string]*fnv1.Resource{"job": next.GetDesired().GetResources()[string(k.rn)]}); d != "" {
				t.Errorf("the running Job's template changed with the world (immutable: every apply would fail) (-created +now):\n%s", d)
			}

			// Succeeded and reported: ready, then dropped once recorded.
			rsp = next
			var gone bool
			for range 4 {
				feedBack(t, req, rsp, true)
				if r := req.Observed.Resources[string(k.rn)]; r != nil {
					o, err := readObserved(req.GetObserved().GetResources())
					if err != nil {
						t.Fatal(err)
					}
					if !readiness[k.rn](k.rn, o, 0) {
						t.Errorf("%s succeeded but is not ready by its rule", k.rn)
					}
				}
				rsp = runTestIn(t, req, k.done(t, req))
				if _, ok := rsp.GetDesired().GetResources()[string(k.rn)]; !ok {
					gone = true
					break
				}
			}
			if !gone {
				t.Errorf("%s is still composed four reconciles after it succeeded: its outcome is never recorded, or the record never read back", k.rn)
			}
		})
	}
}

// oneShotBuilders are the functions of the package's sources that call
// oneShotJob, sorted; it fails for a Job built anywhere but oneshot.go.
func oneShotBuilders(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "oneShotJob" {
						found[fn.Name.Name] = true
					}
				case *ast.CompositeLit:
					if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Job" && f != "oneshot.go" {
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "batchv1" {
							t.Errorf("%s: %s builds a batchv1.Job itself: build it with oneShotJob (oneshot.go)", fset.Position(n.Pos()), fn.Name.Name)
						}
					}
				}
				return true
			})
		}
	}
	return slices.Sorted(maps.Keys(found))
}
