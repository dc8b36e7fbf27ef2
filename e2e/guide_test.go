//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/example/function-database/e2e/internal/kube"
)

// guideSection is the section of docs/operating.md (guidePage) whose
// commands TestPlatformGuide runs.
const (
	guidePage    = "docs/operating.md"
	guideSection = "## Running it as a platform team"
)

// guideCommands reads the command lines of the section's sh blocks, in order.
func guideCommands(readme string) ([]string, error) {
	blocks, err := readmeBlocks(readme, guideSection)
	var out []string
	for _, b := range blocks {
		for _, line := range strings.Split(b, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
	}
	return out, err
}

// TestPlatformGuide runs the commands of docs/operating.md's platform-team section
// verbatim, in order, from the repository root, with the pinned kubectl and
// crossplane CLI, and checks what each is there to show. Pods here are
// kwok's: that the app reaches PostgreSQL is appConnects' (real node).
func TestPlatformGuide(t *testing.T) {
	s := env
	s.step(t, "Commands", s.testPlatformGuide)
}

func (s *suite) testPlatformGuide(t *testing.T) {
	cmds, err := guideCommands(filepath.Join(s.root, guidePage))
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) == 0 {
		t.Fatalf("no commands in %s's %q", guidePage, guideSection)
	}
	sh := s.newShell(t, s.root)
	sh.timeout = 11 * time.Minute // the guide's waits are 10 minutes at most

	gone := func(what string, check func() error) {
		eventually(t, deleteWait, what+" gone", func() (bool, string) {
			err := check()
			return apierrors.IsNotFound(err), "still there: " + errString(err)
		})
	}
	wantIn := func(out string, want ...string) func(*testing.T) {
		return func(t *testing.T) {
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		}
	}
	// What each command is there to show, beyond succeeding.
	checks := map[string]func(t *testing.T, out string){
		"kubectl -n warehouse describe secret inventory-connection": func(t *testing.T, out string) {
			wantIn(out, append([]string{"connection.crossplane.io/v1alpha1"}, claimSecretKeys...)...)(t)
		},
		"kubectl -n shop rollout status deployment/orders-app --timeout=5m": func(t *testing.T, out string) {
			wantIn(out, "successfully rolled out")(t)
		},
		"kubectl -n shop get databases.example.com": func(t *testing.T, out string) {
			wantIn(out, "orders", "Running", "orders.shop.svc.cluster.local")(t)
		},
		"kubectl -n shop describe databases.example.com orders": func(t *testing.T, out string) {
			wantIn(out, "BackupHealthy", "SpecApplied", "VersionSupported", "Ready")(t)
		},
		"crossplane resource trace databases.example.com orders -n shop": func(t *testing.T, out string) {
			wantIn(out, "Database/orders", "StatefulSet/orders", "Secret/orders-credentials", "CronJob/orders-backup")(t)
		},
		"kubectl -n shop get statefulsets,pods,pvc,cronjobs -l app.kubernetes.io/instance=orders": func(t *testing.T, out string) {
			wantIn(out, "statefulset.apps/orders", "pod/orders-0", "persistentvolumeclaim/data-orders-0", "cronjob.batch/orders-backup")(t)
		},
		// The API server defaults the RollingUpdate partition to 0, which
		// kubectl reports as "partitioned roll out complete"; "rolling update
		// complete" is its word for no partition.
		"kubectl -n shop rollout status statefulset/orders --timeout=10m": func(t *testing.T, out string) {
			if !strings.Contains(out, "roll out complete") && !strings.Contains(out, "rolling update complete") {
				t.Errorf("the roll is not complete:\n%s", out)
			}
		},
		"kubectl delete -f example/app.yaml": func(t *testing.T, _ string) {
			gone("Deployment shop/orders-app", func() error {
				_, err := s.k.CS.AppsV1().Deployments("shop").Get(context.Background(), "orders-app", metav1.GetOptions{})
				return err
			})
		},
		"kubectl -n shop delete databases.example.com orders": func(t *testing.T, _ string) {
			s.waitGone(t, "shop", composed("orders", 2, true), deleteWait)
		},
		// Under Retain the volumes stay.
		"kubectl -n shop get pvc -l app.kubernetes.io/instance=orders": func(t *testing.T, out string) {
			wantIn(out, "data-orders-0", "data-orders-1", "backups-orders-0")(t)
		},
		// The claim's Secret goes with the claim.
		"kubectl -n warehouse delete databases.legacy.example.com inventory": func(t *testing.T, _ string) {
			gone("Secret warehouse/inventory-connection", func() error {
				_, err := s.k.CS.CoreV1().Secrets("warehouse").Get(context.Background(), "inventory-connection", metav1.GetOptions{})
				return err
			})
		},
	}
	t.Cleanup(func() {
		// Volumes the guide leaves on purpose; later tests need none.
		_ = s.k.CS.CoreV1().PersistentVolumeClaims("shop").DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=orders"})
	})

	// A user's cluster has no claim yet. LegacyClaim's claim has the
	// guide's name: left in place, the guide's wait for Ready would pass on
	// what that scenario composed, not on what the guide's commands do.
	claim, err := kube.ReadObject(s.example("legacy", "claim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	absent := func(err error) bool { return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) } // no such claim, or no legacy XRD yet
	if err := s.k.Delete(context.Background(), claim.GroupVersionKind(), claim.GetNamespace(), claim.GetName()); err != nil && !absent(err) {
		t.Fatalf("deleting an earlier claim %s/%s: %v", claim.GetNamespace(), claim.GetName(), err)
	}
	gone("an earlier claim "+claim.GetNamespace()+"/"+claim.GetName(), func() error {
		_, err := s.k.Get(context.Background(), claim.GroupVersionKind(), claim.GetNamespace(), claim.GetName())
		if absent(err) {
			return apierrors.NewNotFound(schema.GroupResource{}, claim.GetName())
		}
		return err
	})

	ran := map[string]bool{}
	for _, line := range cmds {
		out, stderr, err := sh.try(line)
		// Earlier scenarios may have made the namespace; a user's cluster
		// would not have it yet.
		if err != nil && strings.HasPrefix(line, "kubectl create namespace ") && strings.Contains(stderr, "AlreadyExists") {
			t.Logf("$ %s\n(already there: %s)", line, strings.TrimSpace(stderr))
			continue
		}
		if err != nil {
			t.Fatalf("$ %s: %v\n%s%s", line, err, out, prefixed("\n(stderr) ", stderr))
		}
		t.Logf("$ %s\n%s%s", line, strings.TrimRight(out, "\n"), prefixed("\n(stderr) ", stderr))
		if c := checks[line]; c != nil {
			c(t, out)
			ran[line] = true
		}
	}
	for line := range checks {
		if !ran[line] {
			t.Errorf("no command %q in %s's %q any more: update the guide or this test", line, guidePage, guideSection)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "found"
	}
	return err.Error()
}
