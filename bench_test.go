package main

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/example/function-database/internal/wire"
)

const (
	benchSmall       = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"16\", size: small}"
	benchLargeBackup = "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"16\", size: large, backup: {enabled: true}}"
)

// perfRequests are the requests of the benchmarks and of the load tool
// (testdata/perf/*.yaml, written by go test -run TestPerfRequests -update).
func perfRequests(t testing.TB) map[string]*fnv1.RunFunctionRequest {
	t.Helper()
	observedLarge := xrRequest(yamlStruct(t, benchLargeBackup), nil)
	observedLarge.Observed.Resources = observedFrom(t, runTest(t, observedLarge), true)
	first := xrRequest(yamlStruct(t, benchLargeBackup), nil)
	return map[string]*fnv1.RunFunctionRequest{
		"small":          xrRequest(yamlStruct(t, benchSmall), nil),
		"large-backup":   first,
		"large-observed": observedLarge,
		// The same first reconcile for function-go-templating (peers_test.go),
		// in a folder of its own: hack/perf.sh sends testdata/perf/*.yaml to ours.
		"peers/go-templating": goTemplatingRequest(t, first),
	}
}

func TestPerfRequests(t *testing.T) {
	for name, req := range perfRequests(t) {
		golden(t, filepath.Join("perf", name+".yaml"), responseYAML(t, req))
	}
}

// BenchmarkRunFunction measures what the server does per request after
// decoding it: RunFunction and the deterministic marshal of the response.
func BenchmarkRunFunction(b *testing.B) {
	reqs := perfRequests(b)
	for _, name := range []string{"small", "large-backup", "large-observed"} {
		req := reqs[name]
		b.Run(name, func(b *testing.B) {
			f := testFunction()
			b.ReportAllocs()
			for b.Loop() {
				rsp, err := f.RunFunction(b.Context(), req)
				if err != nil || len(rsp.GetResults()) > 0 {
					b.Fatalf("unexpected: %v %v", err, rsp.GetResults())
				}
				data, err := wire.Codec{}.Marshal(rsp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free() // as grpc does once the response is written
			}
		})
	}
}

// BenchmarkReconcile measures a whole reconcile as Crossplane makes it:
// every call until the requirements stop changing (a call that requires
// resources is followed by one that carries them), each RunFunction and
// its marshal. calls/op is how many calls that took: one for a new
// Database and for a healthy one (the pods are not asked for while the
// StatefulSet's status counts every instance ready), two while an
// instance is not ready.
// steadyArchived is the archive example running: every resource observed
// and ready, its archive check passed, its last drill recorded in status.
func steadyArchived(b *testing.B) *fnv1.RunFunctionRequest {
	b.Helper()
	req := xrRequest(readYAMLStruct(b, "example/archive/xr.yaml"), compositionInput(b, "example/archive/composition.yaml"))
	for range 2 {
		feedBack(b, req, runTest(b, req), true)
	}
	return req
}

// benchPasswords numbers the passwords of BenchmarkReconcile/first, unique in
// the process.
var benchPasswords atomic.Int64

func BenchmarkReconcile(b *testing.B) {
	reqs := perfRequests(b)
	unready := proto.CloneOf(reqs["large-observed"])
	structAt(unready.Observed.Resources[string(rnStatefulSet)].GetResource(), "status").Fields["readyReplicas"] = structpb.NewNumberValue(2)
	cases := []struct {
		name string
		req  *fnv1.RunFunctionRequest
	}{
		{"first", reqs["large-backup"]},
		{"steady", reqs["large-observed"]},
		{"instance-unready", unready},
		{"archived-steady", steadyArchived(b)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			f := testFunction()
			if tc.name == "first" {
				// A new Database's passwords are new: its SCRAM verifiers
				// are computed, never found in the process's memo (which
				// testFunction's repeated sequence would fill by the
				// second run, measuring 0.3 ms instead of 2.4).
				f.password = func() string { return fmt.Sprintf("bench-password-%d", benchPasswords.Add(1)) }
			}
			cluster := instancePodsOf(b, tc.req)
			b.ReportAllocs()
			calls := 0
			for b.Loop() {
				req := tc.req
				var prev *fnv1.Requirements
				for {
					rsp, err := f.RunFunction(b.Context(), req)
					if err != nil {
						b.Fatal(err)
					}
					data, err := wire.Codec{}.Marshal(rsp)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
					calls++
					if proto.Equal(rsp.GetRequirements(), prev) {
						break
					}
					prev = rsp.GetRequirements()
					req = proto.CloneOf(tc.req)
					req.RequiredResources = map[string]*fnv1.Resources{}
					for name, sel := range prev.GetResources() {
						req.RequiredResources[name] = fetchRequired(sel, cluster)
					}
				}
			}
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
		})
	}
}
