package main

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/internal/wire"
)

// example is an example XR with the Composition that renders it.
type example struct {
	name, xr, composition string
}

func examples(t *testing.T) []example {
	t.Helper()
	out := []example{{"medium", "example/xr.yaml", "example/composition.yaml"}}
	files, err := filepath.Glob("example/xrs/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, f := range files {
		out = append(out, example{strings.TrimSuffix(filepath.Base(f), ".yaml"), f, "example/composition.yaml"})
	}
	return append(out,
		example{"legacy", "example/legacy/xr.yaml", "example/legacy/composition.yaml"},
		example{"archive", "example/archive/xr.yaml", "example/archive/composition.yaml"})
}

// TestGoldenExamples pins the whole response for every example: a new
// Database (nothing observed yet) and the same Database running (every
// composed resource observed, instances ready, a backup taken).
func TestGoldenExamples(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			req := xrRequest(readYAMLStruct(t, ex.xr), compositionInput(t, ex.composition))
			rsp := runTest(t, req)
			if r := rsp.GetResults(); len(r) > 0 {
				t.Fatalf("example %s: unexpected results: %v", ex.xr, r)
			}
			golden(t, ex.name+".new.yaml", responseYAML(t, withPinnedScripts(t, rsp)))

			req.Observed.Resources = observedFrom(t, rsp, true)
			running := runTest(t, req)
			golden(t, ex.name+".running.yaml", responseYAML(t, withPinnedScripts(t, running)))
		})
	}
}

// scriptsPin is the one golden file that holds the scripts the scripts
// ConfigMap ships; the response goldens show a reference to it instead, so
// that an edit to a script changes this file and no response golden (an
// edit to a script the instances run still changes their config-hash
// annotation: that is the pods rolling, which a reviewer must see).
const scriptsPin = "scripts.txt"

// TestGoldenScripts pins the scripts every scripts ConfigMap ships, one
// section per key, as plain text: readable, and a diff shows the lines that
// changed (JSON-quoted in a response golden, a script is one long string).
func TestGoldenScripts(t *testing.T) {
	var b strings.Builder
	b.WriteString("# The scripts every scripts ConfigMap ships (data key: content), pinned once here;\n")
	b.WriteString("# the response goldens (testdata/*.yaml, test/render/testdata/) show a reference instead.\n")
	for _, name := range slices.Sorted(maps.Keys(scriptFiles)) {
		b.WriteString("\n=== " + name + "\n" + scriptFiles[name])
	}
	golden(t, scriptsPin, []byte(b.String()))
}

// pinnedScript is what a response golden shows for the script name: where
// its content is pinned.
func pinnedScript(name string) string {
	return "(scripts/" + name + ", pinned in testdata/" + scriptsPin + ")"
}

// withPinnedScripts returns a copy of rsp whose scripts ConfigMap shows
// pinnedScript for each script. It fails the test when a script's content is
// not exactly the embedded file (which TestGoldenScripts pins), so the
// response goldens stay as strict as when they held the content.
func withPinnedScripts(t *testing.T, rsp *fnv1.RunFunctionResponse) *fnv1.RunFunctionResponse {
	t.Helper()
	out := proto.CloneOf(rsp)
	cm := out.GetDesired().GetResources()[string(rnScripts)].GetResource()
	data := cm.GetFields()["data"].GetStructValue()
	if data == nil {
		t.Fatalf("the response has no scripts ConfigMap with data")
	}
	for name, want := range scriptFiles {
		got, ok := data.GetFields()[name]
		if !ok {
			t.Errorf("the scripts ConfigMap lacks %s", name)
			continue
		}
		if got.GetStringValue() != want {
			t.Errorf("the scripts ConfigMap's %s is not the embedded scripts/%s:\n%s", name, name, lineDiff(want, got.GetStringValue()))
		}
		data.Fields[name] = structpb.NewStringValue(pinnedScript(name))
	}
	return out
}

// TestObservedFixtures writes example/observed/: the medium Database's
// composed resources as a running cluster would show them, for
// `crossplane composition render -o example/observed`.
func TestObservedFixtures(t *testing.T) {
	req := xrRequest(readYAMLStruct(t, "example/xr.yaml"), compositionInput(t, "example/composition.yaml"))
	rsp := runTest(t, req)
	obs := observedFrom(t, rsp, true)
	names := make([]string, 0, len(obs))
	for n := range obs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		j, err := obs[n].GetResource().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		y, err := yaml.JSONToYAML(j)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("example", "observed", n+".yaml")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, y, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("cannot read %s (run go test -run TestObservedFixtures -update): %v", path, err)
		}
		if string(want) != string(y) {
			t.Errorf("%s is stale; run go test -run TestObservedFixtures -update:\n%s", path, lineDiff(string(want), string(y)))
		}
	}
}

// TestDeterministic: the same request gives the same response bytes, with
// the passwords read back from observed Secrets (the only randomness is a
// first password, before its Secret exists).
func TestDeterministic(t *testing.T) {
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			req := xrRequest(readYAMLStruct(t, ex.xr), compositionInput(t, ex.composition))
			first := runTest(t, req)
			req.Observed.Resources = observedFrom(t, first, true)
			f := NewFunction(nil) // real crypto/rand passwords: none may be drawn
			f.log = testFunction().log
			var prev []byte
			for i := range 5 {
				rsp, err := f.RunFunction(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(rsp)
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 && string(b) != string(prev) {
					t.Fatalf("call %d gave different bytes than call %d", i, i-1)
				}
				prev = b
			}
		})
	}
}

// TestFixedPoint: feeding the desired state back as observed (with server
// status added, and the XR status the function wrote) gives the same desired
// state, so Crossplane never patches in a loop. The first response differs
// from the second only by what the observed state legitimately changes: the
// initialized marker, and a restore Job dropped once its success is recorded.
func TestFixedPoint(t *testing.T) {
	for _, ex := range examples(t) {
		for _, running := range []bool{false, true} {
			t.Run(ex.name+map[bool]string{true: "/running", false: "/starting"}[running], func(t *testing.T) {
				req := xrRequest(readYAMLStruct(t, ex.xr), compositionInput(t, ex.composition))
				rsp := runTest(t, req)
				for i := range 3 {
					feedBack(t, req, rsp, running)
					next := runTest(t, req)
					if i > 0 {
						if d := diffProto(desiredOf(rsp), desiredOf(next)); d != "" {
							t.Fatalf("round %d: desired state changed when fed back as observed (-prev +next):\n%s", i, d)
						}
					}
					rsp = next
				}
			})
		}
	}
}

func diffProto(a, b map[string]*fnv1.Resource) string {
	ya, yb := resourcesYAML(a), resourcesYAML(b)
	if ya == yb {
		return ""
	}
	return lineDiff(ya, yb)
}

func resourcesYAML(rs map[string]*fnv1.Resource) string {
	j, err := protojson.Marshal(&fnv1.State{Resources: rs})
	if err != nil {
		return err.Error()
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return err.Error()
	}
	return string(y)
}

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// responseYAML renders a request or response as YAML with sorted keys, for
// golden files (wire.YAML, the debug decoder).
func responseYAML(t testing.TB, rsp proto.Message) []byte {
	t.Helper()
	y, err := wire.YAML(rsp)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("cannot read golden file (run go test -update): %v", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from the golden file; run `go test -run %s -update` and review the diff:\n%s", path, t.Name(), lineDiff(string(want), string(got)))
	}
}
