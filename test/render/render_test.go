// Package render renders every example with the real crossplane CLI and
// Crossplane core (no Docker) against the function served on loopback,
// compares each output with a golden file in testdata/, and checks it with
// `crossplane resource validate`.
//
//	go test ./test/render/            tools from hack/tools.sh, or CROSSPLANE_BIN / CROSSPLANE_CORE_BIN
//	go test ./test/render/ -update    rewrites testdata/
package render

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/example/function-database/internal/promcrds"
	"github.com/example/function-database/internal/scram"
	"github.com/example/function-database/scripts"
	"github.com/example/function-database/test/internal/testtools"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// env is what TestMain prepares for the tests.
var env struct {
	root             string
	crossplane, core string   // the CLI and core binaries
	missing          error    // a tool is missing: skip, or fail in CI
	err              error    // anything else that went wrong: fail
	target           string   // where the function listens
	fnLog            string   // the function's log file
	validateCache    string   // crossplane resource validate's cache, holding core's CRDs
	crds             []string // the Prometheus Operator's CRDs, for what metrics compose
}

func TestMain(m *testing.M) {
	flag.Parse()
	tmp, err := os.MkdirTemp("", "render-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stop := setup(tmp)
	code := m.Run()
	stop()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

// setup finds the tools, builds the function once and serves it on a free
// loopback port. It records what went wrong in env and returns what stops the
// function.
func setup(tmp string) (stop func()) {
	stop = func() {}
	if env.root, env.err = testtools.Root(); env.err != nil {
		return stop
	}
	if env.crossplane, env.missing = testtools.Bin("CROSSPLANE_BIN", "crossplane"); env.missing != nil {
		return stop
	}
	if env.core, env.missing = testtools.Bin("CROSSPLANE_CORE_BIN", "crossplane-core"); env.missing != nil {
		return stop
	}
	if env.validateCache, env.err = prefillValidateCache(filepath.Join(tmp, "validate-cache")); env.err != nil {
		return stop
	}
	if env.crds, env.err = promcrds.Files(env.root); env.err != nil {
		return stop
	}
	bin := filepath.Join(tmp, "function")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = env.root
	if out, err := build.CombinedOutput(); err != nil {
		env.err = fmt.Errorf("go build: %w\n%s", err, out)
		return stop
	}
	env.fnLog = filepath.Join(tmp, "function.log")
	var fn *process
	if fn, env.target, env.err = startFunction(bin, env.fnLog); env.err != nil {
		return stop
	}
	return fn.stop
}

// prefillValidateCache puts Crossplane core's CRDs where `crossplane resource
// validate` looks for xpkg.crossplane.io/crossplane/crossplane:stable, so that
// it needs no network.
func prefillValidateCache(cache string) (string, error) {
	download := exec.Command("go", "mod", "download", "-json", "github.com/crossplane/crossplane/v2")
	download.Dir = filepath.Join(env.root, "tools-core")
	out, err := download.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/crossplane/crossplane/v2 in tools-core: %w", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", err
	}
	crds, err := filepath.Glob(filepath.Join(mod.Dir, "cluster", "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return "", fmt.Errorf("no Crossplane CRDs in %s/cluster/crds", mod.Dir)
	}
	dst := filepath.Join(cache, "xpkg.crossplane.io", "crossplane", "crossplane@stable")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	for _, crd := range crds {
		b, err := os.ReadFile(crd)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(crd)), b, 0o644); err != nil {
			return "", err
		}
	}
	return cache, nil
}

// A process is a started command whose exit is watched.
type process struct {
	cmd    *exec.Cmd
	exited chan error
}

func (p *process) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// startFunction serves the function in plain text on a free loopback port and
// waits until it listens. It retries when another process takes the port first.
func startFunction(bin, logPath string) (*process, string, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer log.Close() // The child holds its own descriptor.
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		addr := l.Addr().String()
		_ = l.Close()
		cmd := exec.Command(bin, "--insecure", "--address="+addr, "--metrics-address=")
		cmd.Stdout, cmd.Stderr = log, log
		testtools.KillWithParent(cmd)
		if err := cmd.Start(); err != nil {
			return nil, "", err
		}
		p := &process{cmd: cmd, exited: make(chan error, 1)}
		go func() { p.exited <- cmd.Wait() }()
		if waitListening(addr, p.exited, time.Minute) {
			return p, addr, nil
		}
		p.stop()
	}
	b, _ := os.ReadFile(logPath)
	return nil, "", fmt.Errorf("the function did not start; its log:\n%s", b)
}

// waitListening waits until addr accepts connections, the process exits or
// the time is up.
func waitListening(addr string, exited chan error, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return true
		}
		select {
		case err := <-exited:
			exited <- err // For stop.
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}

func requireSetup(t *testing.T) {
	t.Helper()
	if env.missing != nil {
		testtools.Missing(t, env.missing)
	}
	if env.err != nil {
		t.Fatal(env.err)
	}
}

// An example is one rendering: paths are relative to the repository root.
type example struct {
	name        string // the golden file is testdata/<name>.yaml
	xr          string
	composition string
	xrd         string
	observed    string // observed composed resources (render -o), if any
	required    string // resources the function may require (render -e), if any
}

func examples(t *testing.T) []example {
	t.Helper()
	xs := []example{
		{name: "xr", xr: "example/xr.yaml"},
		{name: "xr-observed", xr: "example/xr.yaml", observed: "example/observed/"},
		{name: "legacy-xr", xr: "example/legacy/xr.yaml", composition: "example/legacy/composition.yaml", xrd: "example/legacy/xrd.yaml"},
		// The platform's object storage Secret, which the Composition's
		// input names, as the function reads it through required resources.
		{name: "archive-xr", xr: "example/archive/xr.yaml", composition: "example/archive/composition.yaml", xrd: "example/xrd.yaml", required: "example/archive/object-storage-secret.yaml"},
	}
	variants, err := filepath.Glob(filepath.Join(env.root, "example", "xrs", "*.yaml"))
	if err != nil || len(variants) == 0 {
		t.Fatalf("no example/xrs/*.yaml (%v)", err)
	}
	for _, v := range variants {
		base := filepath.Base(v)
		x := example{name: "xrs-" + strings.TrimSuffix(base, ".yaml"), xr: "example/xrs/" + base}
		if base == "restore.yaml" {
			// Its source, Database orders in shop, as the function reads
			// it through Crossplane's required resources.
			x.required = "example/xr.yaml"
		}
		xs = append(xs, x)
	}
	for i := range xs {
		if xs[i].composition == "" {
			xs[i].composition, xs[i].xrd = "example/composition.yaml", "example/xrd.yaml"
		}
	}
	return xs
}

func TestRender(t *testing.T) {
	requireSetup(t)
	xs := examples(t)
	for _, x := range xs {
		t.Run(x.name, func(t *testing.T) {
			out := render(t, x)
			got := normalize(t, out, x.observed == "")
			if *update {
				if err := os.WriteFile(goldenPath(x.name), got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			compareGolden(t, x.name, got)
			validate(t, x.xrd, out)
		})
	}

	// Every golden file belongs to an example.
	goldens, _ := filepath.Glob(goldenPath("*"))
	for _, g := range goldens {
		name := strings.TrimSuffix(filepath.Base(g), ".yaml")
		if slices.ContainsFunc(xs, func(x example) bool { return x.name == name }) {
			continue
		}
		if *update {
			_ = os.Remove(g)
			continue
		}
		t.Errorf("%s belongs to no example: remove it (-update does)", g)
	}
}

// TestRenderScript runs the README's command, hack/render.sh, which builds and
// serves the function itself: it must print what TestRender's xr example did.
func TestRenderScript(t *testing.T) {
	requireSetup(t)
	cmd := exec.Command(filepath.Join("hack", "render.sh"), "example/xr.yaml", "-x")
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "CROSSPLANE_BIN="+env.crossplane, "CROSSPLANE_CORE_BIN="+env.core)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/render.sh: %v\n%s", err, stderr.Bytes())
	}
	compareGolden(t, "xr", normalize(t, out, true))
}

// render renders an example with the function's results (-r) and the whole XR
// (-x: its spec too, for validate).
func render(t *testing.T, x example) []byte {
	t.Helper()
	args := []string{
		"composition", "render", x.xr, x.composition, "example/functions.yaml",
		"--xrd", x.xrd, "--crossplane-binary", env.core, "-r", "-x",
		"-a", "render.crossplane.io/runtime=Development",
		"-a", "render.crossplane.io/runtime-development-target=" + env.target,
	}
	if x.observed != "" {
		args = append(args, "-o", x.observed)
	}
	if x.required != "" {
		args = append(args, "--required-resources", x.required)
	}
	cmd := exec.Command(env.crossplane, args...)
	cmd.Dir = env.root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		fnLog, _ := os.ReadFile(env.fnLog)
		t.Fatalf("crossplane %s: %v\n%s\nthe function's log:\n%s", strings.Join(args, " "), err, stderr.Bytes(), fnLog)
	}
	return out
}

// validate checks the XR against its XRD and the composed resources against
// their types, offline. The function's results (kind Result) have no schema:
// they are left out.
func validate(t *testing.T, xrd string, rendered []byte) {
	t.Helper()
	var resources []string
	for _, doc := range documents(rendered) {
		if !hasLine(doc, "apiVersion: render.crossplane.io/v1beta1") {
			resources = append(resources, doc)
		}
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(resources, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(env.crossplane, "resource", "validate", strings.Join(append([]string{xrd}, env.crds...), ","), file,
		"--cache-dir", env.validateCache, "--error-on-missing-schemas")
	cmd.Dir = env.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("crossplane resource validate %s: %v\n%s", xrd, err, out)
	}
	// An empty input passes too: every resource must have been validated.
	n := len(resources)
	if want := fmt.Sprintf("Total %d resources: 0 missing schemas, %d success cases, 0 failure cases", n, n); !strings.Contains(string(out), want) {
		t.Errorf("crossplane resource validate %s: want %q in\n%s", xrd, want, out)
	}
}

// documents splits render's output: documents each after a line "---".
func documents(out []byte) []string {
	var docs []string
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		if doc = strings.TrimPrefix(doc, "---\n"); doc != "" {
			docs = append(docs, strings.TrimSuffix(doc, "\n")+"\n")
		}
	}
	return docs
}

func hasLine(doc, line string) bool {
	return slices.Contains(strings.Split(doc, "\n"), line)
}

func goldenPath(name string) string {
	return filepath.Join("testdata", name+".yaml")
}

func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := goldenPath(name)
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no golden file %s: go test ./test/render/ -update writes it", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("rendered output differs from %s (go test ./test/render/ -update rewrites it; -want +got):\n%s", path, cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")))
	}
}

// normalize replaces what differs from one rendering to the next, and only
// that:
//   - a first password is random (crypto/rand): when no Secret is observed,
//     every Secret's password and replication-password, wherever they occur in
//     its data (uri, pgpass...), become <password> and <replication-password>
//     (the superuser Secret's app-password copy becomes <password> too), and
//     each SCRAM verifier of one (the superuser Secret's *-verifier keys)
//     becomes <KEY> once it is checked to verify the password beside it.
//     With observed Secrets the passwords are read back: they stay as they are.
//   - Crossplane core reports "Composed resource ... is not yet ready" results
//     in map order: those are sorted among themselves.
//
// Condition timestamps are already fixed by the CLI. The scripts ConfigMap's
// scripts are checked against the embedded files and replaced by a reference
// to their one golden (pinScripts).
func normalize(t *testing.T, out []byte, randomPasswords bool) []byte {
	t.Helper()
	docs := documents(out)
	var results []int
	for i, doc := range docs {
		switch {
		case randomPasswords && hasLine(doc, "kind: Secret"):
			docs[i] = maskPasswords(t, doc)
		case hasLine(doc, "kind: ConfigMap"):
			docs[i] = pinScripts(t, doc)
		case hasLine(doc, "kind: Result") && hasLine(doc, "reason: ComposeResources"):
			results = append(results, i)
		}
	}
	sorted := make([]string, len(results))
	for j, i := range results {
		sorted[j] = docs[i]
	}
	slices.Sort(sorted)
	for j, i := range results {
		docs[i] = sorted[j]
	}
	return []byte("---\n" + strings.Join(docs, "---\n"))
}

// pinScripts replaces each script of a rendered scripts ConfigMap by a
// reference to testdata/scripts.txt at the repository's root, the one golden
// that holds them (the root package's TestGoldenScripts): a script edit then
// changes that file, not every rendering. The content must be exactly the
// script as shipped (scripts.Shipped), so the goldens stay as strict as when
// they held it.
func pinScripts(t *testing.T, doc string) string {
	t.Helper()
	var cm map[string]any
	if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
		t.Fatalf("cannot parse a rendered ConfigMap: %v", err)
	}
	data, _ := cm["data"].(map[string]any)
	if data == nil {
		return doc
	}
	for name, want := range scripts.Shipped() {
		got, ok := data[name].(string)
		if !ok {
			t.Errorf("the rendered ConfigMap lacks %s", name)
			continue
		}
		if got != want {
			t.Errorf("the rendered ConfigMap's %s is not scripts/%s as shipped (-want +got):\n%s", name, name, cmp.Diff(want, got))
		}
		data[name] = "(scripts/" + name + ", pinned in testdata/scripts.txt)"
	}
	b, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// maskPasswords replaces the passwords in a Secret's data (base64 values, one
// a line) with placeholders, and their verifiers once checked.
func maskPasswords(t *testing.T, doc string) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := slices.Index(lines, "data:")
	if start < 0 {
		return doc
	}
	type entry struct {
		line       int
		key, value string
	}
	var entries []entry
	placeholders := map[string]string{} // password: placeholder
	for i := start + 1; i < len(lines) && strings.HasPrefix(lines[i], "  "); i++ {
		key, b64, _ := strings.Cut(strings.TrimSpace(lines[i]), ": ")
		value, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		entries = append(entries, entry{i, key, string(value)})
		switch {
		case (key == "password" || key == "replication-password") && len(value) > 0:
			placeholders[string(value)] = "<" + key + ">"
		case key == "app-password" && len(value) > 0:
			// The superuser Secret's copy of the app password.
			placeholders[string(value)] = "<password>"
		}
	}
	byKey := map[string]string{}
	for _, e := range entries {
		byKey[e.key] = e.value
	}
	for i, e := range entries {
		password, isVerifier := strings.CutSuffix(e.key, "-verifier")
		if !isVerifier {
			continue
		}
		if !scram.Verifies(e.value, byKey[password]) {
			t.Errorf("the Secret's %s does not verify its %s", e.key, password)
		}
		entries[i].value = "<" + e.key + ">"
	}
	for _, e := range entries {
		for password, placeholder := range placeholders {
			e.value = strings.ReplaceAll(e.value, password, placeholder)
		}
		lines[e.line] = "  " + e.key + ": " + base64.StdEncoding.EncodeToString([]byte(e.value))
	}
	return strings.Join(lines, "\n")
}

// TestDocSample: the render docs/composed.md shows under "A real render" (the
// StatefulSet of example/xr.yaml, then the Database as it runs, from
// example/observed/) is the one the real CLI renders (its golden files), and
// the status lines the README quotes under "What the render shows" are lines
// of that Database in order, so neither page can drift from the function. It
// needs no tools: it reads the goldens, which TestRender checks against the
// CLI.
func TestDocSample(t *testing.T) {
	const doc = "docs/composed.md"
	blocks := yamlBlocks(t, doc, "## A real render")
	if len(blocks) < 2 {
		t.Fatalf(`%s's "## A real render" section has %d yaml blocks, want the StatefulSet and the running Database`, doc, len(blocks))
	}
	sts := goldenDoc(t, "xr", "apps/v1", "StatefulSet")
	if d := cmp.Diff(sts, blocks[0]); d != "" {
		t.Errorf("%s's sample StatefulSet differs from the render of example/xr.yaml (-render +doc); copy it from %s:\n%s", doc, filepath.Join("test", "render", goldenPath("xr")), d)
	}
	xr := goldenDoc(t, "xr-observed", "example.com/v1", "Database")
	if d := cmp.Diff(xr, blocks[1]); d != "" {
		t.Errorf("%s's running Database differs from the render of example/xr.yaml with example/observed (-render +doc); copy it from %s:\n%s", doc, filepath.Join("test", "render", goldenPath("xr-observed")), d)
	}

	quoted := yamlBlocks(t, "README.md", "### What the render shows")
	if len(quoted) == 0 {
		t.Fatal(`README.md's "### What the render shows" has no yaml block`)
	}
	rest := strings.Split(xr, "\n")
	for _, line := range strings.Split(strings.TrimSuffix(quoted[0], "\n"), "\n") {
		i := slices.Index(rest, line)
		if i < 0 {
			t.Errorf("README.md quotes %q under \"What the render shows\": not a line of the running Database in %s (or out of order)", line, filepath.Join("test", "render", goldenPath("xr-observed")))
			continue
		}
		rest = rest[i+1:]
	}
}

// yamlBlocks returns the yaml blocks of the section of the repository's file
// that starts at the line heading, up to the next heading of its level or
// above.
func yamlBlocks(t *testing.T, file, heading string) []string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no %q section", file, heading)
	}
	level := heading[:strings.Index(heading, " ")+1] // "## "
	for h := "# "; len(h) <= len(level); h = "#" + h {
		if before, _, found := strings.Cut(section, "\n"+h); found {
			section = before
		}
	}
	var blocks []string
	for {
		_, after, found := strings.Cut(section, "```yaml\n")
		if !found {
			return blocks
		}
		block, rest, closed := strings.Cut(after, "```")
		if !closed {
			t.Fatalf("%s: an unclosed yaml block in %q", file, heading)
		}
		blocks = append(blocks, block)
		section = rest
	}
}

// goldenDoc is the document of the given apiVersion and kind in a golden render.
func goldenDoc(t *testing.T, name, apiVersion, kind string) string {
	t.Helper()
	golden, err := os.ReadFile(goldenPath(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range documents(golden) {
		if hasLine(doc, "kind: "+kind) && hasLine(doc, "apiVersion: "+apiVersion) {
			return doc
		}
	}
	t.Fatalf("no %s %s in the golden render %s", apiVersion, kind, goldenPath(name))
	return ""
}

// ownGroup is the API group TestRenderOwnGroup renames the example's to.
const ownGroup = "platform.acme.io"

// TestRenderOwnGroup renders the example with its XRD, Composition and XR
// moved to a platform's own API group, as docs/install.md's "Your own API group"
// says to: the function reads an XR's spec and metadata, never its group,
// so the render is the example's byte for byte but for the group.
func TestRenderOwnGroup(t *testing.T) {
	requireSetup(t)
	dir := t.TempDir()
	renamed := map[string]string{}
	for _, f := range []string{"example/xrd.yaml", "example/composition.yaml", "example/xr.yaml"} {
		b, err := os.ReadFile(filepath.Join(env.root, f))
		if err != nil {
			t.Fatal(err)
		}
		s := renameGroup(string(b), "example.com", ownGroup)
		if s == string(b) {
			t.Fatalf("%s names no example.com group to rename", f)
		}
		renamed[f] = filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(renamed[f], []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	x := example{name: "own-group", xr: renamed["example/xr.yaml"], composition: renamed["example/composition.yaml"], xrd: renamed["example/xrd.yaml"]}
	out := render(t, x)
	validate(t, x.xrd, out)
	want := normalize(t, render(t, example{name: "xr", xr: "example/xr.yaml", composition: "example/composition.yaml", xrd: "example/xrd.yaml"}), true)
	// crossplane render derives the XR's uid (in owner references) from
	// its apiVersion: the one field that differs by the group besides it.
	uid := regexp.MustCompile(`(?m)^(\s+uid: ).*$`)
	want = uid.ReplaceAll(want, []byte("${1}UID"))
	got := uid.ReplaceAll(normalize(t, out, true), []byte("${1}UID"))
	if d := cmp.Diff(string(want), renameGroup(string(got), ownGroup, "example.com")); d != "" {
		t.Errorf("the render in group %s differs from the example's beyond the group (-example +renamed back):\n%s", ownGroup, d)
	}
}

// renameGroup moves an XRD, Composition or XR from one API group to
// another: the XRD's name and group, and every apiVersion of the group.
// The function input's group (database.fn.example.com) is not the XR's.
func renameGroup(s, from, to string) string {
	return strings.NewReplacer(
		"name: databases."+from+"\n", "name: databases."+to+"\n",
		"group: "+from+"\n", "group: "+to+"\n",
		"apiVersion: "+from+"/", "apiVersion: "+to+"/",
	).Replace(s)
}
