package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// cgroupTree makes a pod cgroup tree as a kubelet's (cgroupfs driver) under
// a temporary folder: each path's cgroup.procs with its content.
func cgroupTree(t *testing.T, procs map[string]string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "kubepods")
	for dir, pids := range procs {
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(pids), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func sorted(pids []int) []int {
	out := slices.Clone(pids)
	slices.Sort(out)
	return out
}

func TestKubepodsPIDsUnder(t *testing.T) {
	root := cgroupTree(t, map[string]string{
		".":                     "",
		"burstable":             "",
		"burstable/podAAA":      "1\n100\n", // 1 is never a pod's
		"burstable/podAAA/ctr1": "101\n100\n",
		"besteffort/podBBB":     "200\n",
		"besteffort/podBBB/x":   "201 oops 202\n",
		"podCCC/ctr":            "300\n101\n",
	})
	for _, c := range []struct {
		uid  string
		seen []int
		want []int
	}{
		{"", nil, []int{100, 101, 200, 201, 202, 300}},
		{"AAA", nil, []int{100, 101}},
		{"BBB", nil, []int{200, 201, 202}},
		{"AAA", []int{100}, []int{101}},
		{"", []int{100, 200, 300}, []int{101, 201, 202}},
		{"ZZZ", nil, nil},
	} {
		got := kubepodsPIDsUnder(root, c.uid, c.seen)
		if !slices.Equal(sorted(got), c.want) {
			t.Errorf("uid %q seen %v: %v, want %v", c.uid, c.seen, got, c.want)
		}
		if len(slices.Compact(sorted(got))) != len(got) {
			t.Errorf("uid %q: %v names a process twice", c.uid, got)
		}
	}
	if got := kubepodsPIDsUnder(filepath.Join(root, "none"), "", nil); got != nil {
		t.Errorf("a cgroup that is not there: %v, want none", got)
	}
}

func TestUnmountOrder(t *testing.T) {
	const table = `sysfs /sys sysfs rw 0 0
tmpfs /run/e2e tmpfs rw 0 0
overlay /run/e2e/node/containerd/root/a/rootfs overlay rw 0 0
tmpfs /run/e2e-other/node/kubelet/x tmpfs rw 0 0
shm /run/e2e/node/containerd/state/a/shm tmpfs rw 0 0
tmpfs /run/e2e/node/kubelet/pods/p/volumes/secret tmpfs rw 0 0
overlay /run/e2e/node/containerd/root/a/rootfs/proc proc rw 0 0

short
`
	got := unmountOrder(table, "/run/e2e")
	want := []string{
		"/run/e2e/node/containerd/root/a/rootfs/proc", // mounted last, inside the rootfs: first
		"/run/e2e/node/kubelet/pods/p/volumes/secret",
		"/run/e2e/node/containerd/state/a/shm",
		"/run/e2e/node/containerd/root/a/rootfs",
	}
	if !slices.Equal(got, want) {
		t.Errorf("unmountOrder = %v, want %v (not the folder itself, nor a folder beside it)", got, want)
	}
	if got := unmountOrder(table, "/nowhere"); len(got) != 0 {
		t.Errorf("nothing mounted below: %v", got)
	}
}
