// Package pkg builds the function's and the Configuration's packages with
// hack/package.sh (no Docker), pushes them with hack/push.sh to a loopback
// registry, pulls them back and checks them: the function's index has one
// package per platform, each with its package layer and a runtime whose
// /function is a static binary for that platform; the Configuration depends
// on the function and its Composition names the Function that dependency
// becomes; and the packaged binary serves a real render of the packaged
// Composition.
//
//	go test ./test/pkg/    tools from hack/tools.sh, or CROSSPLANE_BIN / CROSSPLANE_CORE_BIN / CRANE_BIN
package pkg

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/example/function-database/test/internal/testtools"
)

const (
	// functionPackage is what the test builds the Configuration to depend
	// on; the '.' in the path shows the naming rule at work.
	functionPackage = "xpkg.example.test/platform.team/function-database"
	// functionName is the Function Crossplane v2.3.4's package manager
	// creates for that dependency: xpkg.ToDNSLabel of the repository path
	// (resolver.NewPackage), written out here rather than derived again.
	functionName = "platform-team-function-database"
	version      = "v0.0.0-test"
)

// platforms are the function package's platforms and their ELF machines.
var platforms = map[string]elf.Machine{
	"linux/amd64": elf.EM_X86_64,
	"linux/arm64": elf.EM_AARCH64,
}

type tools struct {
	root, crossplane, core, crane string
}

func setup(t *testing.T) tools {
	t.Helper()
	root, err := testtools.Root()
	if err != nil {
		t.Fatal(err)
	}
	ts := tools{root: root}
	for _, tool := range []struct {
		path      *string
		env, name string
	}{
		{&ts.crossplane, "CROSSPLANE_BIN", "crossplane"},
		{&ts.core, "CROSSPLANE_CORE_BIN", "crossplane-core"},
		{&ts.crane, "CRANE_BIN", "crane"},
	} {
		if *tool.path, err = testtools.Bin(tool.env, tool.name); err != nil {
			testtools.Missing(t, err)
		}
	}
	return ts
}

// env is the environment the hack scripts run with: these tools, this output.
func (ts tools) env(out string, extra ...string) []string {
	return append(append(os.Environ(),
		"CROSSPLANE_BIN="+ts.crossplane, "CROSSPLANE_CORE_BIN="+ts.core, "CRANE_BIN="+ts.crane, "OUTPUT_DIR="+out), extra...)
}

// The OCI (or Docker) documents the test reads, as crane prints them.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Annotations map[string]string `json:"annotations"`
		Platform    *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	}
	index struct {
		MediaType string       `json:"mediaType"`
		Manifests []descriptor `json:"manifests"`
	}
	manifest struct {
		Layers []descriptor `json:"layers"`
	}
	imageConfig struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			Entrypoint   []string            `json:"Entrypoint"`
			User         string              `json:"User"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		} `json:"config"`
	}
)

// The package.yaml objects the test reads: only the fields it checks.
type (
	object struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	functionMeta struct {
		object
		Spec struct {
			Capabilities []string `json:"capabilities"`
		} `json:"spec"`
	}
	inputCRD struct {
		object
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
		} `json:"spec"`
	}
	configurationMeta struct {
		object
		Spec struct {
			DependsOn []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Package    string `json:"package"`
				Version    string `json:"version"`
			} `json:"dependsOn"`
		} `json:"spec"`
	}
	composition struct {
		object
		Spec struct {
			Pipeline []struct {
				Step        string `json:"step"`
				FunctionRef struct {
					Name string `json:"name"`
				} `json:"functionRef"`
			} `json:"pipeline"`
		} `json:"spec"`
	}
)

func TestPackage(t *testing.T) {
	ts := setup(t)
	tmp := t.TempDir()
	out := filepath.Join(tmp, "output")

	run(t, ts.root, ts.env(out, "FUNCTION_PACKAGE="+functionPackage), filepath.Join("hack", "package.sh"))
	registry := startRegistry(t, ts.crane, filepath.Join(tmp, "registry"))
	fnRepo, cfgRepo := registry+"/test/function-database", registry+"/test/configuration-database"
	run(t, ts.root, ts.env(out), filepath.Join("hack", "push.sh"), fnRepo+":"+version, cfgRepo+":"+version)

	// The function: an index of one package per platform.
	var idx index
	decode(t, run(t, ts.root, nil, ts.crane, "manifest", fnRepo+":"+version), &idx)
	if !strings.Contains(idx.MediaType, "index") && !strings.Contains(idx.MediaType, "manifest.list") {
		t.Fatalf("%s:%s is a %q, want an image index", fnRepo, version, idx.MediaType)
	}
	var got []string
	var host string
	for _, m := range idx.Manifests {
		if m.Platform == nil {
			t.Errorf("index entry %s has no platform", m.Digest)
			continue
		}
		p := m.Platform.OS + "/" + m.Platform.Architecture
		got = append(got, p)
		machine, ok := platforms[p]
		if !ok {
			t.Errorf("index entry %s is for %s, which the package is not built for", m.Digest, p)
			continue
		}
		t.Run(p, func(t *testing.T) {
			fn := checkFunctionPackage(t, ts, fnRepo+"@"+m.Digest, m.Platform.OS, m.Platform.Architecture, machine)
			if p == runtime.GOOS+"/"+runtime.GOARCH && fn != nil {
				host = filepath.Join(tmp, "function")
				if err := os.WriteFile(host, fn, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if want := slices.Sorted(maps.Keys(platforms)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("the index holds platforms %v, want one each of %v", got, want)
	}

	// The Configuration: the XRD and the Composition, whose functionRef is
	// the Function its dependency becomes.
	cfgDir := filepath.Join(tmp, "configuration")
	checkConfiguration(t, ts, cfgRepo+":"+version, cfgDir)

	// The host's /function, pulled back, serves a render of the packaged
	// Composition under the name its Function gets.
	if host == "" {
		t.Fatalf("no package for this machine's platform %s/%s to render with", runtime.GOOS, runtime.GOARCH)
	}
	functions := filepath.Join(cfgDir, "functions.yaml")
	if err := os.WriteFile(functions, []byte(`apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: `+functionName+`
spec:
  package: `+functionPackage+`:`+version+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered := run(t, ts.root, ts.env(out, "FUNCTION_BIN="+host,
		"RENDER_COMPOSITION="+filepath.Join(cfgDir, "composition.yaml"),
		"RENDER_XRD="+filepath.Join(cfgDir, "xrd.yaml"),
		"RENDER_FUNCTIONS="+functions),
		filepath.Join("hack", "render.sh"), "example/xr.yaml")
	if !slices.ContainsFunc(strings.Split(string(rendered), "\n---\n"), func(doc string) bool {
		return hasLine(doc, "kind: StatefulSet") && strings.Contains(doc, "containers:") && strings.Contains(doc, "image: ")
	}) {
		t.Errorf("the render served by the packaged function holds no StatefulSet with containers:\n%s", rendered)
	}
}

// checkFunctionPackage checks one platform's package: the package layer with
// the Function's metadata and input CRD, the runtime's config, and /function,
// a static ELF for the platform's machine, which it returns.
func checkFunctionPackage(t *testing.T, ts tools, ref, goos, goarch string, machine elf.Machine) []byte {
	t.Helper()
	var m manifest
	decode(t, run(t, ts.root, nil, ts.crane, "manifest", ref), &m)
	if len(m.Layers) != 2 {
		t.Fatalf("the package has %d layers, want 2 (runtime, package): %+v", len(m.Layers), m.Layers)
	}
	repo, _, _ := strings.Cut(ref, "@")
	var pkgYAML, function []byte
	for _, l := range m.Layers {
		files := untar(t, run(t, ts.root, nil, ts.crane, "blob", repo+"@"+l.Digest))
		if l.Annotations["io.crossplane.xpkg"] == "base" {
			pkgYAML = files["/package.yaml"]
			if pkgYAML == nil {
				t.Errorf("the base layer holds no package.yaml: %v", slices.Sorted(maps.Keys(files)))
			}
			continue
		}
		if f, ok := files["/function"]; ok {
			function = f
		}
	}
	if pkgYAML == nil {
		t.Fatal("no layer annotated io.crossplane.xpkg: base with a package.yaml")
	}
	if function == nil {
		t.Fatal("no runtime layer holds /function")
	}
	checkFunctionYAML(t, pkgYAML)

	var config imageConfig
	decode(t, run(t, ts.root, nil, ts.crane, "config", ref), &config)
	if c := config.Config; !slices.Equal(c.Entrypoint, []string{"/function"}) || c.User != "65532" ||
		len(c.ExposedPorts) != 1 || c.ExposedPorts["9443/tcp"] != struct{}{} {
		t.Errorf("image config: entrypoint %q, user %q, exposed ports %v; want [/function], 65532, 9443/tcp",
			c.Entrypoint, c.User, slices.Sorted(maps.Keys(c.ExposedPorts)))
	}
	if config.OS != goos || config.Architecture != goarch {
		t.Errorf("image config platform %s/%s, want %s/%s as in the index", config.OS, config.Architecture, goos, goarch)
	}

	f, err := elf.NewFile(bytes.NewReader(function))
	if err != nil {
		t.Fatalf("/function is not an ELF file: %v", err)
	}
	if f.Machine != machine || f.Class != elf.ELFCLASS64 {
		t.Errorf("/function is a %s %s ELF, want %s %s", f.Class, f.Machine, elf.ELFCLASS64, machine)
	}
	// Static: the runtime image has nothing but /function, so no loader.
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("/function asks for a program interpreter: not a static binary")
		}
	}
	return function
}

// checkFunctionYAML checks the function package's stream: the Function's
// metadata and the function's input CRD.
func checkFunctionYAML(t *testing.T, b []byte) {
	t.Helper()
	var meta, crd bool
	for _, doc := range yamlDocs(b) {
		var o object
		unmarshal(t, doc, &o)
		switch o.Kind {
		case "Function":
			meta = true
			var fn functionMeta
			unmarshal(t, doc, &fn)
			if fn.APIVersion != "meta.pkg.crossplane.io/v1" || fn.Metadata.Name != "function-database" || !slices.Equal(fn.Spec.Capabilities, []string{"composition"}) {
				t.Errorf("Function metadata: %s %q, capabilities %v; want meta.pkg.crossplane.io/v1, function-database, [composition]",
					fn.APIVersion, fn.Metadata.Name, fn.Spec.Capabilities)
			}
		case "CustomResourceDefinition":
			crd = true
			var c inputCRD
			unmarshal(t, doc, &c)
			if c.Spec.Group != "database.fn.example.com" || c.Spec.Names.Kind != "Input" {
				t.Errorf("the CRD is %s kind %s, want the function's input (database.fn.example.com, kind Input)", c.Spec.Group, c.Spec.Names.Kind)
			}
		default:
			t.Errorf("the function package holds a %s %s", o.Kind, o.Metadata.Name)
		}
	}
	if !meta || !crd {
		t.Errorf("package.yaml: Function metadata %v, input CRD %v; want both:\n%s", meta, crd, b)
	}
}

// checkConfiguration pulls the Configuration and checks its stream: the
// Configuration's metadata with its dependency on the function, the XRD and
// the Composition of example/, the Composition's functionRef set to the
// Function the dependency becomes. It writes the XRD and the Composition to
// dir.
func checkConfiguration(t *testing.T, ts tools, ref, dir string) {
	t.Helper()
	var m manifest
	decode(t, run(t, ts.root, nil, ts.crane, "manifest", ref), &m)
	if len(m.Layers) != 1 || m.Layers[0].Annotations["io.crossplane.xpkg"] != "base" {
		t.Fatalf("the Configuration has layers %+v, want one, annotated io.crossplane.xpkg: base", m.Layers)
	}
	repo, _, _ := strings.Cut(ref, ":"+version)
	pkgYAML := untar(t, run(t, ts.root, nil, ts.crane, "blob", repo+"@"+m.Layers[0].Digest))["/package.yaml"]
	if pkgYAML == nil {
		t.Fatal("the Configuration's layer holds no package.yaml")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"Configuration": false, "CompositeResourceDefinition": false, "Composition": false}
	for _, doc := range yamlDocs(pkgYAML) {
		var o object
		unmarshal(t, doc, &o)
		if seen, ok := want[o.Kind]; !ok || seen {
			t.Errorf("the Configuration holds an unexpected %s %s", o.Kind, o.Metadata.Name)
			continue
		}
		want[o.Kind] = true
		switch o.Kind {
		case "Configuration":
			var c configurationMeta
			unmarshal(t, doc, &c)
			if c.APIVersion != "meta.pkg.crossplane.io/v1" || len(c.Spec.DependsOn) != 1 {
				t.Errorf("Configuration metadata %s with %d dependencies, want meta.pkg.crossplane.io/v1 with 1", c.APIVersion, len(c.Spec.DependsOn))
				continue
			}
			if d := c.Spec.DependsOn[0]; d.APIVersion != "pkg.crossplane.io/v1" || d.Kind != "Function" || d.Package != functionPackage || d.Version == "" {
				t.Errorf("dependency %+v, want a pkg.crossplane.io/v1 Function %s with a version constraint", d, functionPackage)
			}
		case "CompositeResourceDefinition":
			if o.Metadata.Name != "databases.example.com" {
				t.Errorf("the XRD is %s, want example/xrd.yaml's databases.example.com", o.Metadata.Name)
			}
			writeFile(t, filepath.Join(dir, "xrd.yaml"), doc)
		case "Composition":
			var c composition
			unmarshal(t, doc, &c)
			if len(c.Spec.Pipeline) == 0 {
				t.Errorf("the Composition %s has no pipeline", c.Metadata.Name)
			}
			for _, s := range c.Spec.Pipeline {
				if s.FunctionRef.Name != functionName {
					t.Errorf("step %s calls Function %q, want %q: the name Crossplane gives the dependency %s", s.Step, s.FunctionRef.Name, functionName, functionPackage)
				}
			}
			writeFile(t, filepath.Join(dir, "composition.yaml"), doc)
		}
	}
	for kind, seen := range want {
		if !seen {
			t.Errorf("the Configuration holds no %s", kind)
		}
	}
}

// TestPackageRefusesUnqualified: the Configuration's dependency must name a
// registry, or Crossplane would look for the function on its default one.
func TestPackageRefusesUnqualified(t *testing.T) {
	ts := setup(t)
	for _, ref := range []string{"acme/function-database", "xpkg.example.test/acme/function-database:v0.1.0", "xpkg.example.test"} {
		cmd := exec.Command(filepath.Join(ts.root, "hack", "package.sh"))
		cmd.Env = ts.env(t.TempDir(), "FUNCTION_PACKAGE="+ref)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "is not REGISTRY/REPOSITORY") {
			t.Errorf("FUNCTION_PACKAGE=%s: %v, want exit status 2 and why:\n%s", ref, err, out)
		}
	}
}

func hasLine(doc, line string) bool {
	return slices.Contains(strings.Split(doc, "\n"), line)
}

// yamlDocs splits a YAML stream into its non-empty documents.
func yamlDocs(b []byte) [][]byte {
	var docs [][]byte
	for doc := range strings.SplitSeq(string(b), "\n---") {
		doc = strings.TrimPrefix(strings.TrimPrefix(doc, "---"), "\n")
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

func unmarshal(t *testing.T, doc []byte, v any) {
	t.Helper()
	if err := yaml.Unmarshal(doc, v); err != nil {
		t.Fatalf("%v:\n%s", err, doc)
	}
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startRegistry serves a registry on a free loopback port until the test ends
// and returns its host:port.
func startRegistry(t *testing.T, crane, disk string) string {
	t.Helper()
	if err := os.MkdirAll(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(crane, "registry", "serve", "--address", "127.0.0.1:0", "--disk", disk)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	testtools.KillWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	port := make(chan string, 1)
	go func() {
		defer close(exited)
		defer func() { _ = cmd.Wait() }()
		s := bufio.NewScanner(stderr)
		serving := regexp.MustCompile(`serving on port (\d+)`)
		for s.Scan() {
			if m := serving.FindStringSubmatch(s.Text()); m != nil {
				port <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p := <-port:
		return "127.0.0.1:" + p
	case <-exited:
		t.Fatal("crane registry serve exited")
	case <-time.After(time.Minute):
		t.Fatal("crane registry serve did not start within a minute")
	}
	return ""
}

// run runs a command in dir (env nil: the test's environment) and returns its
// standard output; it fails the test with the standard error.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.Bytes())
	}
	t.Logf("%s %s: %s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
}

// untar reads a (gzipped) layer: regular files by absolute path.
func untar(t *testing.T, layer []byte) map[string][]byte {
	t.Helper()
	var r io.Reader = bytes.NewReader(layer)
	if gz, err := gzip.NewReader(bytes.NewReader(layer)); err == nil {
		r = gz
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean("/"+h.Name)] = b
	}
}

// TestCrossplaneConstraint: both packages admit no Crossplane older than
// the one the e2e suite installs (hack/tools.sh CORE_VERSION), the only
// core version tested: a constraint wider than the tests promises what
// nobody checked.
func TestCrossplaneConstraint(t *testing.T) {
	root, err := testtools.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "hack", "tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CORE_VERSION=(v\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("hack/tools.sh sets no CORE_VERSION")
	}
	want := ">=" + string(m[1])
	for _, f := range []string{"package/crossplane.yaml", "configuration/crossplane.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Spec struct {
				Crossplane struct {
					Version string `json:"version"`
				} `json:"crossplane"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got := meta.Spec.Crossplane.Version; got != want {
			t.Errorf("%s: spec.crossplane.version %q, want %q (the Crossplane the e2e suite runs)", f, got, want)
		}
	}
}
