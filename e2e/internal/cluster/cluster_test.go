package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var errNotYet = errors.New("not yet")

func TestRetrySucceedsAtOnce(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), time.Minute, func() error { calls++; return nil })
	if err != nil || calls != 1 {
		t.Fatalf("Retry = %v after %d calls, want nil after 1", err, calls)
	}
}

func TestRetryUntilSuccess(t *testing.T) {
	calls := 0
	t0 := time.Now()
	err := Retry(context.Background(), time.Minute, func() error {
		calls++
		if calls < 3 {
			return errNotYet
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Retry = %v after %d calls, want nil after 3", err, calls)
	}
	// Two waits of 500 ms between the three calls.
	if d := time.Since(t0); d < time.Second {
		t.Errorf("three calls in %s, want 500 ms between calls", d)
	}
}

func TestRetryTimeoutReturnsLastError(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), 0, func() error { calls++; return errNotYet })
	if !errors.Is(err, errNotYet) || err.Error() != errNotYet.Error() {
		t.Fatalf("Retry = %v, want f's last error as it is", err)
	}
	if calls != 1 {
		t.Errorf("%d calls past the deadline, want 1", calls)
	}
}

func TestRetryEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := Retry(ctx, time.Minute, func() error { calls++; return errNotYet })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errNotYet) {
		t.Fatalf("Retry = %v, want an error wrapping both the context's and f's", err)
	}
	if calls != 1 {
		t.Errorf("%d calls, want 1", calls)
	}
}

func TestNodeReady(t *testing.T) {
	for _, c := range []struct {
		name  string
		conds []corev1.NodeCondition
		want  bool
	}{
		{"no conditions", nil, false},
		{"ready", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, true},
		{"not ready", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}, false},
		{"unknown", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}, false},
		{"other conditions true", []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
			{Type: corev1.NodeReady, Status: corev1.ConditionFalse},
		}, false},
		{"ready among others", []corev1.NodeCondition{
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		}, true},
	} {
		if got := NodeReady(&corev1.Node{Status: corev1.NodeStatus{Conditions: c.conds}}); got != c.want {
			t.Errorf("%s: NodeReady = %v, want %v", c.name, got, c.want)
		}
	}
}

// kwokReady makes a fake clientset play kwok: a node's status update comes
// back Ready.
func kwokReady(cs *fake.Clientset) {
	cs.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			n := u.GetObject().(*corev1.Node)
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		}
		return false, nil, nil // the tracker stores it
	})
}

func TestKwokNode(t *testing.T) {
	for _, pair := range []bool{false, true} {
		cs := fake.NewClientset()
		kwokReady(cs)
		c := newCluster(Config{Dir: t.TempDir()})
		c.Client = cs
		ctx := context.Background()
		if err := c.KwokNode(ctx, "kwok-node-0", "zone-a", pair); err != nil {
			t.Fatal(err)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantLabels := map[string]string{
			"kubernetes.io/hostname": "kwok-node-0", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"type": "kwok", corev1.LabelTopologyZone: "zone-a",
		}
		if pair {
			wantLabels[PairLabel] = "true"
		}
		if len(n.Labels) != len(wantLabels) {
			t.Errorf("pair %v: labels %v, want %v", pair, n.Labels, wantLabels)
		}
		for k, v := range wantLabels {
			if n.Labels[k] != v {
				t.Errorf("pair %v: label %s = %q, want %q", pair, k, n.Labels[k], v)
			}
		}
		// kwok manages only the nodes annotated so (its flag in Start).
		if n.Annotations["kwok.x-k8s.io/node"] != "fake" {
			t.Errorf("annotations %v: kwok would not manage the node", n.Annotations)
		}
		for res, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "64", corev1.ResourceMemory: "256Gi", corev1.ResourcePods: "110"} {
			for what, l := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
				if q := l[res]; q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s %s = %s, want %s", what, res, q.String(), want)
				}
			}
		}
	}
}

func TestKwokNodeExists(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-0"}})
	c := newCluster(Config{Dir: t.TempDir()})
	c.Client = cs
	if err := c.KwokNode(context.Background(), "kwok-node-0", "zone-a", false); err == nil {
		t.Fatal("KwokNode of a node that exists: no error")
	}
}

func TestVolumesOf(t *testing.T) {
	dir := t.TempDir()
	c := newCluster(Config{Dir: dir})
	if got, want := c.VolumesOf(RealNodeName), filepath.Join(dir, "node", "volumes"); got != want {
		t.Errorf("VolumesOf(%s) = %s, want %s", RealNodeName, got, want)
	}
	// StartExtraNode requires a node's volumes in its folder, Dir/nodes/<name>.
	if got, want := filepath.Dir(c.VolumesOf("pool-node-1")), filepath.Join(dir, "nodes", "pool-node-1"); got != want {
		t.Errorf("VolumesOf(pool-node-1) is in %s, want %s", got, want)
	}
}

func TestStopWithNothingStarted(t *testing.T) {
	c := newCluster(Config{Dir: t.TempDir()})
	c.Stop() // a Start that failed at once: nothing to stop, no panic
	if ps := c.Procs(); len(ps) != 0 {
		t.Errorf("Procs = %v, want none", ps)
	}
	if got, want := c.Binary("etcd"), filepath.Join(c.Bin, "etcd"); got != want {
		t.Errorf("Binary = %s, want %s", got, want)
	}
}
