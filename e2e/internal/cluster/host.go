package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// What the nodes leave on the machine, and how the suite finds and removes
// it: the pods' network namespaces, the kubelets' pod cgroups and their
// processes, containerd's shims, the mounts in the nodes' folders.

// RemovePodNetns deletes the pods' network namespaces (cni-*) that no
// process uses any more, every node's. The pods die by SIGKILL ([Node.Stop]),
// not through the CRI, so the CNI plugin never deletes their namespaces;
// left behind, their addresses collided with the next run's pods on the
// same bridge subnet.
func RemovePodNetns() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cni-") {
			continue
		}
		if pids, err := exec.Command("ip", "netns", "pids", f[0]).Output(); err == nil && len(strings.TrimSpace(string(pids))) == 0 {
			_ = exec.Command("ip", "netns", "delete", f[0]).Run()
		}
	}
}

// killKubepods kills every process in the kubelets' pod cgroups (cgroup v1
// here: the pids hierarchy holds them all), every node's.
func killKubepods() {
	for _, pid := range KubepodsPIDs("") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// CgroupV1 is where the cgroup v1 hierarchies are mounted: the kubelets'
// pod cgroups are <CgroupV1>/<hierarchy>/kubepods/... (the cgroupfs driver).
const CgroupV1 = "/sys/fs/cgroup"

// kubepodsRoots are the pod cgroups of every kubelet of the suite in the
// pids hierarchy: the first node's (cgroupRoot /) and the pool's
// (cgroupRoot /e2e-<node>), including a killed run's.
func kubepodsRoots() []string {
	roots := []string{filepath.Join(CgroupV1, "pids", "kubepods")}
	more, _ := filepath.Glob(filepath.Join(CgroupV1, "pids", "e2e-*", "kubepods"))
	return append(roots, more...)
}

// kubepods is this node's pod cgroup in the pids hierarchy.
func (n *Node) kubepods() string {
	return filepath.Join(CgroupV1, "pids", n.cgroupRoot, "kubepods")
}

// KubepodsPIDs are the processes in the kubelets' pod cgroups (cgroup v1,
// cgroupfs driver: .../pod<UID>/...), of every node, of the pod with this
// UID only unless uid is empty, each once.
func KubepodsPIDs(uid string) []int {
	var pids []int
	for _, root := range kubepodsRoots() {
		pids = append(pids, kubepodsPIDsUnder(root, uid, pids)...)
	}
	return pids
}

// kubepodsPIDsUnder are the processes under one kubelet's pod cgroup root,
// of the pod with this UID only unless uid is empty, each once and none of
// seen.
func kubepodsPIDsUnder(root, uid string, seen []int) []int {
	var pids []int
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" || (uid != "" && !strings.Contains(p, "pod"+uid)) {
			return nil
		}
		data, err := os.ReadFile(p) //nolint:gosec // G122: the kubelets' pod cgroups, in the kernel's cgroupfs: no symlinks to race
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && !slices.Contains(pids, pid) && !slices.Contains(seen, pid) {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// unmountMu makes one unmountUnder wait for another: the nodes stop in
// parallel, and each reads the mount table.
var unmountMu sync.Mutex

// unmountUnder lazily unmounts everything mounted below dir (not dir
// itself), the last mounted first, so that the suite can delete the folder.
func unmountUnder(dir string) {
	unmountMu.Lock()
	defer unmountMu.Unlock()
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	for _, m := range unmountOrder(string(data), dir) {
		_ = exec.Command("umount", "-l", m).Run()
	}
}

// unmountOrder is what unmountUnder unmounts, in order, given the mount
// table (/proc/self/mounts): the mount points below dir, the last mounted
// (the last line) first, so that a mount inside another goes before it.
func unmountOrder(table, dir string) []string {
	var mounts []string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			mounts = append(mounts, f[1])
		}
	}
	slices.Reverse(mounts)
	return mounts
}

// cgroupHierarchies are the mounted cgroup v1 hierarchies (the empty v2
// mount, unified, aside).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(CgroupV1)
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "unified" {
			out = append(out, filepath.Join(CgroupV1, e.Name()))
		}
	}
	return out
}

// makeCgroups creates the node's cgroup root in every hierarchy: the
// kubelet refuses a cgroupRoot that does not exist. A cpuset cgroup starts
// with no CPU and no memory node: the parent's are copied.
func (n *Node) makeCgroups() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.cgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil { //nolint:gosec // G703: a cgroup file of the node's own cgroup root, in a mounted hierarchy
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the node's cgroup root and what its kubelet made
// under it, deepest first (their processes are gone).
func (n *Node) removeCgroups() {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, n.cgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

// shimPIDs are the node's containerd shims (their command line names its
// socket): they outlive containerd, and its containers outlive them.
func (n *Node) shimPIDs() []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if strings.Contains(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, n.sock) {
			if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// linksDown sets every link but the loopback down in the named network
// namespaces (/run/netns) whose inode is one of these.
func linksDown(inodes map[uint64]bool) error {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/run/netns", e.Name()), &st) != nil || !inodes[st.Ino] {
			continue
		}
		out, err := exec.Command("ip", "-n", e.Name(), "-o", "link", "show").Output()
		if err != nil {
			return fmt.Errorf("links of network namespace %s: %w", e.Name(), err)
		}
		for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			// "2: eth0@if7: <BROADCAST,...> ..."
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			link, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if link == "lo" {
				continue
			}
			if b, err := exec.Command("ip", "-n", e.Name(), "link", "set", "dev", link, "down").CombinedOutput(); err != nil {
				return fmt.Errorf("link %s of network namespace %s down: %w: %s", link, e.Name(), err, b)
			}
		}
	}
	return nil
}

// deleteNetns deletes the named network namespaces (/run/netns) whose inode
// is one of these: a pod's namespace outlives its processes as long as it is
// named there, and with it its veth on the bridge and its address, which
// would refuse connections at once where a dead machine answers nothing.
func deleteNetns(inodes map[uint64]bool) []string {
	var deleted []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/run/netns", e.Name()), &st) == nil && inodes[st.Ino] {
			if exec.Command("ip", "netns", "delete", e.Name()).Run() == nil {
				deleted = append(deleted, e.Name())
			}
		}
	}
	return deleted
}
