//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/kube"
)

// originalManifest is the manifest users of the original Database CRD have
// (issue 16), byte for byte; example/xrs/original.yaml holds the same
// manifest under a comment.
const originalManifest = `apiVersion: example.com/v1
kind: Database
metadata: {name: my-production-db, namespace: production}
spec: {version: "14", size: large, backup_enabled: true, backup_schedule: "0 2 * * *"}
`

// originalCommands are the commands they run, verbatim, in a shell whose
// kubeconfig's context namespace is the manifest's (as theirs would be: the
// commands name no namespace).
var originalCommands = struct{ apply, getDatabase, getDB, patch, delete string }{
	apply:       "kubectl apply -f database.yaml",
	getDatabase: "kubectl get database my-production-db",
	getDB:       "kubectl get db",
	patch:       `kubectl patch database my-production-db -p '{"spec":{"size":"medium"}}' --type=merge`,
	delete:      "kubectl delete database my-production-db",
}

// TestOriginal runs the original Database CRD's manifest and commands
// unchanged against the control plane: backups on from the flat fields, the
// end-of-life condition of PostgreSQL 14, the columns of kubectl get, a
// patch of the size, and everything composed gone after delete (the volumes
// stay: deletionPolicy defaults to Retain).
func TestOriginal(t *testing.T) {
	env.step(t, "Admission", env.testOriginalAdmission)
	env.step(t, "ManifestAndCommands", env.testOriginal)
}

// Admission: the XRD takes the flat fields, refuses the two spellings with
// different values naming both, and does not let a schema default make a
// flat field conflict; versions that cannot exist are refused.
func (s *suite) testOriginalAdmission(t *testing.T) {
	ns := exampleXR(t).GetNamespace()
	s.ensureNamespace(t, ns)
	cases := []struct {
		name string
		set  map[string]any
		want []string // empty: admitted
	}{
		{"flat fields", map[string]any{"backup_enabled": true, "backup_schedule": "0 2 * * *"}, nil},
		{"both spellings agreeing", map[string]any{"backup_enabled": true, "backup.enabled": true, "backup_schedule": "@daily", "backup.schedule": "@daily"}, nil},
		{"flat schedule beside a nested backup without one", map[string]any{"backup_schedule": "0 3 * * *", "backup.retention": int64(3)}, nil},
		{"enabled in both spellings, differing", map[string]any{"backup_enabled": true, "backup.enabled": false}, []string{"spec.backup_enabled and spec.backup.enabled differ"}},
		{"schedule in both spellings, differing", map[string]any{"backup_schedule": "0 3 * * *", "backup.schedule": "0 2 * * *"}, []string{"spec.backup_schedule and spec.backup.schedule differ"}},
		{"flat schedule that is no cron", map[string]any{"backup_schedule": "nightly"}, []string{"spec.backup_schedule", "should match"}},
		{"a major that does not exist yet", map[string]any{"version": "19"}, []string{"spec.version", "should match"}},
		{"a minor that never will", map[string]any{"version": "16.99"}, []string{"spec.version", "should match"}},
	}
	for i, c := range cases {
		// Only the case's fields beside version and size (example/xr.yaml
		// sets spec.backup, which would speak too).
		xr := newDatabase(t, fmt.Sprintf("admission-%d", i), nil)
		if err := unstructured.SetNestedMap(xr.Object, map[string]any{"version": "16", "size": "small"}, "spec"); err != nil {
			t.Fatal(err)
		}
		for path, v := range c.set {
			if err := unstructured.SetNestedField(xr.Object, v, append([]string{"spec"}, strings.Split(path, ".")...)...); err != nil {
				t.Fatalf("set spec.%s: %v", path, err)
			}
		}
		cl, err := s.k.ResourceFor(xr)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Create(context.Background(), xr, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case len(c.want) == 0 && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case len(c.want) == 0:
			t.Logf("%s: admitted", c.name)
		case err == nil:
			t.Errorf("%s: admitted, want a refusal mentioning %q", c.name, c.want)
		case !apierrors.IsInvalid(err):
			t.Errorf("%s: want an Invalid error, got %v", c.name, err)
		default:
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not mention %q", c.name, err, w)
				}
			}
			t.Logf("%s: refused: %v", c.name, err)
		}
	}
}

func (s *suite) testOriginal(t *testing.T) {
	const ns, n = "production", "my-production-db"
	example, err := os.ReadFile(s.example("xrs", "original.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(example), originalManifest) {
		t.Fatalf("example/xrs/original.yaml does not end with the original manifest:\n%s", originalManifest)
	}
	s.ensureNamespace(t, ns)
	sh := s.originalShell(t, ns)
	if err := os.WriteFile(filepath.Join(sh.dir, "database.yaml"), []byte(originalManifest), 0o644); err != nil {
		t.Fatal(err)
	}

	sh.run(t, originalCommands.apply)
	d := database{gvk: kube.GVK("example.com/v1", "Database"), ns: ns, name: n}
	defer func() { _ = s.k.Delete(context.Background(), d.gvk, ns, n) }()
	s.waitSynced(t, d, 1)

	// large: three instances; backups on from the flat fields, at 02:00.
	objs := s.waitExists(t, ns, composed(n, 3, true))
	if got := str(objs[obj{gvkCronJob, n + "-backup"}], "spec", "schedule"); got != "0 2 * * *" {
		t.Errorf("CronJob %s-backup schedule = %q, want \"0 2 * * *\" (spec.backup_schedule)", n, got)
	}
	sts := s.statefulSet(t, ns, n)
	if r := ptrInt(sts.Spec.Replicas); r != 3 {
		t.Errorf("StatefulSet %s replicas = %d, want 3 (large)", n, r)
	}
	if img := container(sts, "postgres").Image; img != "postgres:14" {
		t.Errorf("StatefulSet %s image = %q, want postgres:14", n, img)
	}

	u := s.waitReady(t, d)
	if got := str(u, "status", "ready"); got != "true" {
		t.Errorf("status.ready = %q once Ready, want true\n%s", got, kube.ToYAML(u))
	}
	eol := kube.GetCondition(u, "VersionSupported")
	if eol.Status != "False" || eol.Reason != "EndOfLife" || !strings.Contains(eol.Message, "PostgreSQL 14 reached its end of life on 2026-11-12") {
		t.Errorf("condition VersionSupported = %s (%s): %q, want False (EndOfLife) naming 2026-11-12", eol.Status, eol.Reason, eol.Message)
	}
	if c := kube.GetCondition(u, "SpecApplied"); c.Status != "True" || !strings.Contains(c.Message, "move to spec.backup.enabled: true") {
		t.Errorf("condition SpecApplied = %s (%s): %q, want True naming where backup_enabled moves", c.Status, c.Reason, c.Message)
	}
	t.Logf("conditions: %s", kube.ConditionsString(u))

	// kubectl get, by the kind's plural and its short name: the columns a
	// user of the original CRD reads, filled.
	for _, cmd := range []string{originalCommands.getDatabase, originalCommands.getDB} {
		out := sh.run(t, cmd)
		rows := strings.Split(strings.TrimSpace(out), "\n")
		header := strings.Fields(rows[0])
		for _, col := range []string{"NAME", "READY", "ENDPOINT", "VERSION", "REPLICAS", "PHASE", "AGE"} {
			if !contains(header, col) {
				t.Errorf("%s: no column %s in %v", cmd, col, header)
			}
		}
		var row map[string]string
		for _, r := range rows[1:] {
			if f := strings.Fields(r); len(f) == len(header) && f[0] == n {
				row = map[string]string{}
				for i, h := range header {
					row[h] = f[i]
				}
			}
		}
		want := map[string]string{"READY": "True", "ENDPOINT": n + "." + ns + ".svc.cluster.local", "VERSION": "14", "REPLICAS": "3", "PHASE": "Running"}
		for col, v := range want {
			if row[col] != v {
				t.Errorf("%s: %s = %q, want %q\n%s", cmd, col, row[col], v, out)
			}
		}
	}

	// kubectl patch: medium is two instances.
	sh.run(t, originalCommands.patch)
	u = d.get(t)
	if u.GetGeneration() < 2 {
		t.Fatalf("the patch did not change the spec: generation %d", u.GetGeneration())
	}
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, syncWait, "StatefulSet with 2 replicas", func() (bool, string) {
		sts = s.statefulSet(t, ns, n)
		return ptrInt(sts.Spec.Replicas) == 2, fmt.Sprintf("replicas %d", ptrInt(sts.Spec.Replicas))
	})
	// Ready may still be the large Database's: status.replicas follows the
	// StatefulSet's status, a reconcile later.
	eventually(t, syncWait, "Ready with status.replicas 2", func() (bool, string) {
		u = d.get(t)
		return kube.GetCondition(u, "Ready").Status == "True" && str(u, "status", "replicas") == "2",
			"status.replicas " + str(u, "status", "replicas") + "; " + kube.ConditionsString(u)
	})
	if _, err := s.getObj(ns, obj{gvkCronJob, n + "-backup"}); err != nil {
		t.Errorf("CronJob %s-backup after the patch: %v (backups must stay on)", n, err)
	}

	// kubectl delete: waits for the Database to go (kubectl's default);
	// every composed object follows, the volumes stay (Retain).
	t0 := time.Now()
	sh.run(t, originalCommands.delete)
	if _, err := s.k.Get(context.Background(), d.gvk, ns, n); !apierrors.IsNotFound(err) {
		t.Errorf("Database %s/%s after kubectl delete returned: %v, want NotFound", ns, n, err)
	}
	s.waitGone(t, ns, append(composed(n, 3, true), obj{gvkPDB, n}, obj{gvkService, n + "-r"}), deleteWait)
	t.Logf("kubectl delete and garbage collection took %s", time.Since(t0).Round(time.Millisecond))
	pvcs, err := s.k.CS.CoreV1().PersistentVolumeClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, p := range pvcs.Items {
		if strings.HasPrefix(p.Name, "data-"+n+"-") && p.DeletionTimestamp == nil {
			kept++
		}
	}
	if kept != 3 {
		t.Errorf("%d data volumes of %s kept after delete, want 3 (deletionPolicy defaults to Retain)", kept, n)
	}
	// Leave no volumes behind for later tests.
	for _, p := range pvcs.Items {
		_ = s.k.CS.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}
}

// shell runs command lines as a user types them: bash in dir, with the
// pinned kubectl and crossplane CLI (built into the tools folder, never
// whatever else is on PATH) and a kubeconfig of its own.
type shell struct {
	dir, kubeconfig, path string
	timeout               time.Duration
}

// newShell makes a shell in dir (empty: a new temporary folder).
func (s *suite) newShell(t *testing.T, dir string) shell {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg, err := os.ReadFile(s.cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	sh := shell{dir: dir, kubeconfig: filepath.Join(home, "kubeconfig"), path: s.cl.Bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	if err := os.WriteFile(sh.kubeconfig, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"kubectl", "crossplane"} {
		if !fileExists(filepath.Join(s.cl.Bin, tool)) {
			t.Fatalf("no %s in %s: hack/cluster-tools.sh and hack/tools.sh build it", tool, s.cl.Bin)
		}
	}
	return sh
}

// originalShell is a shell whose kubeconfig's current context is in the
// namespace, as the original CRD's users have it.
func (s *suite) originalShell(t *testing.T, ns string) shell {
	t.Helper()
	sh := s.newShell(t, "")
	sh.run(t, "kubectl config set-context --current --namespace="+ns)
	return sh
}

func (sh shell) run(t *testing.T, line string) string {
	t.Helper()
	out, stderr, err := sh.try(line)
	if err != nil {
		t.Fatalf("$ %s: %v\n%s%s", line, err, out, stderr)
	}
	t.Logf("$ %s\n%s%s", line, strings.TrimRight(out, "\n"), prefixed("\n(stderr) ", stderr))
	return out
}

// try runs a line, bounded by the shell's timeout (default: a deletion's
// wait and half a minute).
func (sh shell) try(line string) (stdout, stderr string, err error) {
	timeout := sh.timeout
	if timeout == 0 {
		timeout = deleteWait + 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir = sh.dir
	// HOME beside the kubeconfig: kubectl's cache and the crossplane CLI's
	// configuration stay out of the user's home.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+sh.kubeconfig, "PATH="+sh.path, "HOME="+filepath.Dir(sh.kubeconfig))
	// Only stdout is the command's output: kubectl warns on stderr, e.g.
	// that the short name db also matches the legacy XRD's claim once
	// both XRDs are installed (it picks databases.example.com).
	var se strings.Builder
	cmd.Stderr = &se
	out, err := cmd.Output()
	return string(out), se.String(), err
}

func prefixed(prefix, s string) string {
	if s = strings.TrimRight(s, "\n"); s == "" {
		return ""
	}
	return prefix + s
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}
