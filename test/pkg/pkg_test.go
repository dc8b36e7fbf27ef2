// Package pkg builds the function's package with hack/package.sh (no Docker),
// pushes it with hack/push.sh to a loopback registry, pulls it back and checks
// it: the package layer, the runtime image, and that the runtime's /function
// serves a real render.
//
//	go test ./test/pkg/    tools from hack/tools.sh, or CROSSPLANE_BIN / CROSSPLANE_CORE_BIN / CRANE_BIN
package pkg

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/example/function-database/test/internal/testtools"
)

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
func (ts tools) env(out string) []string {
	return append(os.Environ(),
		"CROSSPLANE_BIN="+ts.crossplane, "CROSSPLANE_CORE_BIN="+ts.core, "CRANE_BIN="+ts.crane, "OUTPUT_DIR="+out)
}

func TestPackage(t *testing.T) {
	ts := setup(t)
	tmp := t.TempDir()
	out := filepath.Join(tmp, "output")

	run(t, ts.root, ts.env(out), filepath.Join("hack", "package.sh"))
	repo := startRegistry(t, ts.crane, filepath.Join(tmp, "registry")) + "/test/function-database"
	ref := repo + ":v0.0.0-test"
	run(t, ts.root, ts.env(out), filepath.Join("hack", "push.sh"), ref)

	var manifest struct {
		Layers []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"layers"`
	}
	decode(t, run(t, ts.root, nil, ts.crane, "manifest", ref), &manifest)
	if len(manifest.Layers) != 2 {
		t.Fatalf("the package has %d layers, want 2 (runtime, package): %+v", len(manifest.Layers), manifest.Layers)
	}
	var pkgYAML, function []byte
	for _, l := range manifest.Layers {
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
	checkPackageYAML(t, pkgYAML)

	var config struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			Entrypoint   []string            `json:"Entrypoint"`
			User         string              `json:"User"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		} `json:"config"`
	}
	decode(t, run(t, ts.root, nil, ts.crane, "config", ref), &config)
	if c := config.Config; !slices.Equal(c.Entrypoint, []string{"/function"}) || c.User != "65532" ||
		len(c.ExposedPorts) != 1 || c.ExposedPorts["9443/tcp"] != struct{}{} {
		t.Errorf("image config: entrypoint %q, user %q, exposed ports %v; want [/function], 65532, 9443/tcp",
			c.Entrypoint, c.User, slices.Sorted(maps.Keys(c.ExposedPorts)))
	}
	if config.OS != "linux" || config.Architecture != "amd64" {
		t.Errorf("image platform %s/%s, want linux/amd64", config.OS, config.Architecture)
	}

	// The pulled /function serves a real render.
	bin := filepath.Join(tmp, "function")
	if err := os.WriteFile(bin, function, 0o755); err != nil {
		t.Fatal(err)
	}
	rendered := run(t, ts.root, append(ts.env(out), "FUNCTION_BIN="+bin), filepath.Join("hack", "render.sh"), "example/xr.yaml")
	if !slices.ContainsFunc(strings.Split(string(rendered), "\n---\n"), func(doc string) bool {
		return hasLine(doc, "kind: StatefulSet") && strings.Contains(doc, "containers:") && strings.Contains(doc, "image: ")
	}) {
		t.Errorf("the render served by the packaged function holds no StatefulSet with containers:\n%s", rendered)
	}
}

// checkPackageYAML checks the package stream: the Function's metadata and the
// function's input CRD.
func checkPackageYAML(t *testing.T, b []byte) {
	t.Helper()
	var meta, crd bool
	for doc := range strings.SplitSeq(string(b), "\n---") {
		switch {
		case strings.Contains(doc, "apiVersion: meta.pkg.crossplane.io/") && hasLine(doc, "kind: Function"):
			meta = true
			if !regexp.MustCompile(`(?m)^  name: function-database$`).MatchString(doc) {
				t.Errorf("the Function's metadata is not named function-database:\n%s", doc)
			}
			if !regexp.MustCompile(`(?m)^  capabilities:\n  - composition$`).MatchString(doc) {
				t.Errorf("the Function's metadata has no capabilities [composition]:\n%s", doc)
			}
		case hasLine(doc, "kind: CustomResourceDefinition"):
			crd = true
			if !hasLine(doc, "  group: database.fn.example.com") || !regexp.MustCompile(`(?m)^    kind: Input$`).MatchString(doc) {
				t.Errorf("the CRD is not the function's input (database.fn.example.com, kind Input):\n%s", doc)
			}
		}
	}
	if !meta || !crd {
		t.Errorf("package.yaml: Function metadata %v, input CRD %v; want both:\n%s", meta, crd, b)
	}
}

func hasLine(doc, line string) bool {
	return slices.Contains(strings.Split(doc, "\n"), line)
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
