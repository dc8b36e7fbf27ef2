//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/crossplane"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/proc"
)

// pkgNext is the function version TestOperate upgrades to.
const pkgNext = "v0.2.0"

// TestOperate runs the platform team's side. InstallVerbatim first: the
// cluster was installed by README's Install section (readmeInstall, in the
// suite's set-up). Then it upgrades the function of a fleet through the
// package manager, as a platform team does: version B (pkgNext, built from this
// repository with one script the instances run changed, as most releases
// change one) is pushed to the registry, and the installed Function's
// package set to it. Every Database then rolls on its own, at once: a
// large one with durability sync and a client writing, a medium async one,
// and a small one (one instance). Each must update one instance at a time,
// standbys first, the primary only after a switchover (not the small one:
// it has none), and the checker must find no acknowledged write lost.
// Then the Function goes back to A (a rollback), which rolls them again the
// same way.
//
// It runs alone (no group runs beside it: lanes_realnode_test.go), last
// (with E2E_PARALLEL=1, before the groups that run two at a time); it ends
// on A again (Rollback), the version the tests after it run on.
func TestOperate(t *testing.T) {
	s := env
	s.step(t, "InstallVerbatim", s.installVerbatim)
	s.realNode(t)
	const ns, writerName = "fleet-real", "writer"
	ledger := s.writtenDatabase(t, ns, "ledger", writerName)
	dbs := []database{ledger}
	for _, x := range []struct{ name, size string }{{"notes", "medium"}, {"cache", "small"}} {
		d := s.create(t, realDatabase(t, ns, x.name, x.size, nil))
		dbs = append(dbs, d)
	}
	for _, d := range dbs {
		s.waitRealReady(t, d)
	}

	ctx := context.Background()
	t0 := time.Now()
	if err := s.pushNextFunction(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("function %s built with a changed lib.sh and pushed in %s", pkgNext, time.Since(t0).Round(time.Second))

	s.step(t, "UpgradeFleet", func(t *testing.T) { s.rollFleet(t, ns, writerName, dbs, pkgNext) })
	// Back to A: a rollback is one more pod template, rolled the same way.
	rolledBack := false
	s.step(t, "Rollback", func(t *testing.T) {
		fullMatrix(t, "UpgradeFleet (the same roll of every Database to one more pod template, with the checker)")
		rolledBack = true
		s.rollFleet(t, ns, writerName, dbs, pkgVersion)
	})
	// The fleet leaves the node to the next scenario.
	s.removeDatabases(t, dbs...)
	if !rolledBack {
		// The scenarios after this one run on A: back to it, with no
		// Database left to roll.
		s.functionTo(t, pkgVersion)
	}
	s.step(t, "DeferredUpdates", func(t *testing.T) { s.deferredUpdates(t, ns) })
	// Metrics and AlertFires (metrics_realnode_test.go).
	s.observe(t, ns)
	s.step(t, "OwnGroup", func(t *testing.T) { s.ownGroupDatabase(t, ns) })
}

// deferredUpdates: with the input's updates.policy Deferred a new pod
// template (a minor version) restarts nothing and the Database stays
// Ready; a pod deleted (as a drain would) comes back on it; with the policy
// Supervised again (a maintenance window opens) the rest rolls, the primary
// after a switchover.
func (s *suite) deferredUpdates(t *testing.T, ns string) {
	ctx := context.Background()
	const comp, db = "database-real-deferred", "later"
	deferred := func(in map[string]any) { in["updates"] = map[string]any{"policy": "Deferred"} }
	if err := s.applyComposition(ctx, comp, deferred); err != nil {
		t.Fatal(err)
	}
	u := realDatabase(t, ns, db, "medium", nil)
	if err := unstructured.SetNestedField(u.Object, comp, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	d := s.create(t, u)
	t.Cleanup(func() { s.removeDatabases(t, d) })
	s.waitRealReady(t, d)
	w := s.watchRoll(t, d, ns, db)
	u = d.patch(t, `{"spec":{"version":"15.1"}}`)
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, 2*time.Minute, "Updated=False/Deferred", func() (bool, string) {
		c := kube.GetCondition(d.get(t), "Updated")
		return c.Reason == "Deferred", c.Reason + ": " + c.Message
	})
	if _, state := w.poll(t, s); len(w.replaced) > 0 {
		t.Errorf("pods replaced while updates are deferred: %v; %s", w.replaced, state)
	}
	if c := kube.GetCondition(d.get(t), "Ready"); c.Status != "True" {
		t.Errorf("Ready %s while updates are deferred: %s", c.Status, c.Message)
	}
	standby := db + "-1"
	if str(d.get(t), "status", "primary") == standby {
		standby = db + "-0"
	}
	if err := s.k.CS.CoreV1().Pods(ns).Delete(ctx, standby, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, realReady, standby+" back, ready, on "+cluster.PostgresMinor, func() (bool, string) {
		_, state := w.poll(t, s)
		p, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, standby, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		img := ""
		for _, c := range p.Spec.Containers {
			if c.Name == "postgres" {
				img = c.Image
			}
		}
		return w.replaced[standby] == 1 && podReady(p) && img == cluster.PostgresMinor, img + "; " + state
	})
	if n := len(w.replaced); n != 1 {
		t.Errorf("pods replaced: %v, want only %s (deleted by hand)", w.replaced, standby)
	}
	// The window opens: Supervised (the default) again.
	start := time.Now()
	if err := s.applyComposition(ctx, comp, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Minute, db+" rolled", func() (bool, string) { return w.poll(t, s) })
	s.waitRealReady(t, d)
	w.verify(t, time.Since(start))
}

// functionTo moves the Function to the package version and waits until its
// active revision's pod runs it, healthy.
func (s *suite) functionTo(t *testing.T, version string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if _, err := s.k.MergePatch(ctx, crossplane.GVKFunction, "", s.xp.FnName, fmt.Sprintf(`{"spec":{"package":%q}}`, fnPackage+":"+version)); err != nil {
		t.Fatalf("Function %s to %s: %v", s.xp.FnName, version, err)
	}
	eventually(t, 5*time.Minute, "the Function's active revision runs "+version, func() (bool, string) {
		rev, err := s.xp.Revision(ctx)
		if err != nil {
			return false, err.Error()
		}
		img, _, _ := unstructured.NestedString(rev.Object, "spec", "image")
		pod, state := s.functionPod(ctx)
		return strings.HasSuffix(img, ":"+version) && kube.GetCondition(rev, "RuntimeHealthy").Status == "True" && pod != nil && strings.HasSuffix(pod.Spec.Containers[0].Image, ":"+version),
			fmt.Sprintf("revision %s image %s: %s; %s", rev.GetName(), img, kube.ConditionsString(rev), state)
	})
	t.Logf("%s active and healthy after %s", version, time.Since(start).Round(time.Second))
}

// rollFleet sets the installed Function's package to version, waits for its
// revision to run, then for every Database to roll, and checks each roll
// (rollWatch.verify) and the writer's writes to the first.
func (s *suite) rollFleet(t *testing.T, ns, writerName string, dbs []database, version string) {
	watches := make([]*rollWatch, len(dbs))
	for i, d := range dbs {
		watches[i] = s.watchRoll(t, d, ns, d.name)
	}
	start := time.Now()
	s.functionTo(t, version)
	eventually(t, 15*time.Minute, "every Database rolled", func() (bool, string) {
		all, states := true, []string{}
		for _, w := range watches {
			if w.done {
				continue
			}
			done, state := w.poll(t, s)
			all = all && done
			states = append(states, state)
		}
		return all, strings.Join(states, " | ")
	})
	for _, w := range watches {
		w.verify(t, time.Since(start))
	}
	s.checkRollWrites(t, watches[0], writerName, start)
	for _, d := range dbs {
		s.waitRealReady(t, d)
	}
}

// pushNextFunction builds the function package pkgNext from a copy of the
// repository whose lib.sh (a script every instance runs) has one more
// statement (a no-op: a comment would not do, the function ships the scripts
// without their comments), and pushes it to the registry where the
// ImageConfig sends the function's package name.
func (s *suite) pushNextFunction(ctx context.Context) error {
	src := filepath.Join(s.dir, "src-"+pkgNext)
	if err := copyTree(s.root, src); err != nil {
		return err
	}
	lib := filepath.Join(src, "scripts", "lib.sh")
	b, err := os.ReadFile(lib)
	if err != nil {
		return err
	}
	if err := os.WriteFile(lib, append(b, []byte(": '"+pkgNext+": a release that changes a script the instances run'\n")...), 0o644); err != nil {
		return err
	}
	logDir, out := filepath.Join(s.dir, "logs"), filepath.Join(s.dir, "packages-"+pkgNext)
	logPath := filepath.Join(logDir, "package-"+pkgNext+".log")
	env := []string{
		"CROSSPLANE_BIN=" + filepath.Join(s.bin, "crossplane"),
		"CRANE_BIN=" + filepath.Join(s.bin, "crane"),
		"OUTPUT_DIR=" + out,
		"FUNCTION_PACKAGE=" + fnPackage,
		"PLATFORMS=linux/" + runtime.GOARCH, // the real node's
		"SSL_CERT_FILE=" + s.reg.CAFile(),
	}
	if err := proc.Run(ctx, logPath, src, env, filepath.Join(src, "hack", "package.sh")); err != nil {
		return fmt.Errorf("hack/package.sh for %s: %w\n%s", pkgNext, err, proc.TailFile(logPath, 30))
	}
	if err := proc.Run(ctx, logPath, src, env, filepath.Join(src, "hack", "push.sh"), s.reg.Mirror(pkgHost, fnPackage)+":"+pkgNext); err != nil {
		return fmt.Errorf("hack/push.sh for %s: %w\n%s", pkgNext, err, proc.TailFile(logPath, 30))
	}
	return nil
}

// copyTree copies the files git tracks under from into to.
func copyTree(from, to string) error {
	out, err := exec.Command("git", "-C", from, "ls-files", "-z").Output()
	if err != nil {
		return fmt.Errorf("git ls-files in %s: %w", from, err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		info, err := os.Lstat(filepath.Join(from, rel))
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		b, err := os.ReadFile(filepath.Join(from, rel))
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
