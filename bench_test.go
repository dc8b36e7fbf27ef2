package main

import (
	"path/filepath"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

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
	return map[string]*fnv1.RunFunctionRequest{
		"small":          xrRequest(yamlStruct(t, benchSmall), nil),
		"large-backup":   xrRequest(yamlStruct(t, benchLargeBackup), nil),
		"large-observed": observedLarge,
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
