//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
)

// The real node: kubelet, kube-proxy, containerd + runc + CNI bridge, CoreDNS
// and kube-router's NetworkPolicy firewall, every one a child process with
// its state in the suite's folder. Pods land on it only from namespaces made
// by realNamespace (a node selector and a toleration of its taint, added by
// the API server's PodNodeSelector and PodTolerationRestriction admission);
// every other pod stays on the kwok node.
const (
	realNodeName  = "real-node"
	realNodeTaint = "e2e.function-database/real-node"
	// The pod network is a bridge on this machine with no route or
	// masquerade out of it (a mangle-table guard drops what would leave).
	podCIDR     = "10.88.0.0/16"
	bridgeName  = "fdb0"
	bridgeIP    = "10.88.0.1" // the pods' gateway and their DNS server
	serviceCIDR = "10.0.0.0/24"
	guardChain  = "FDB-E2E-GUARD"

	pauseImage    = "e2e.local/pause:1"
	postgresRepo  = "e2e.local/postgres"
	postgresImage = postgresRepo + ":15"
	// The same image under a newer minor tag, for the minor-roll scenario.
	postgresMinor = postgresRepo + ":15.1"
	// The metrics sidecar: postgres_exporter (hack/tools.sh), its static
	// binary alone at /bin/postgres_exporter. The tag is the version
	// hack/tools.sh pins (EXPORTER_VERSION).
	exporterImage = "e2e.local/postgres-exporter:v0.17.1"
)

type node struct {
	dir  string
	bin  string
	cl   *cluster
	sock string // containerd's socket

	// name is the Node's; the first node is realNodeName, the pool's
	// (TestNodes, nodes_realnode_test.go) are poolNode(i).
	name string
	// labels are the kubelet's --node-labels.
	labels string
	// cgroupRoot is the kubelet's cgroupRoot ("" for the first node: the
	// default, /): the pool's kubelets each have one of their own, so that
	// none sees another's pod cgroups as orphans to kill.
	cgroupRoot string
	// rangeStart and rangeEnd bound the node's pod addresses (host-local)
	// inside podCIDR on the shared bridge: the nodes never hand out the
	// same address.
	rangeStart, rangeEnd string
	// tars are the image archives imported into containerd (the pool's
	// nodes import the first node's).
	tars []string

	containerd, kubelet, proxy, dns, router *proc.Proc
	guard                                   bool
	api                                     net.Listener // exposeAPI's
}

func (n *node) procs() []*proc.Proc {
	var out []*proc.Proc
	for _, p := range []*proc.Proc{n.containerd, n.kubelet, n.proxy, n.dns, n.router} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// realNodeNeeds lists what the real node takes from the machine, with where
// it comes from when missing.
var realNodeNeeds = []struct{ path, from string }{
	{"containerd", "Debian containerd (hack/cluster-tools.sh node)"},
	{"ctr", "Debian containerd"},
	{"runc", "Debian runc"},
	{"iptables", "Debian iptables"},
	{"ipset", "Debian ipset"},
	{"conntrack", "Debian conntrack"},
	{"ip", "Debian iproute2"},
	{"/usr/lib/cni/bridge", "Debian containernetworking-plugins"},
	{"/usr/lib/cni/host-local", "Debian containernetworking-plugins"},
	{"/usr/lib/cni/loopback", "Debian containernetworking-plugins"},
}

func (s *suite) startNode(ctx context.Context) (*node, error) {
	n := &node{
		dir: filepath.Join(s.dir, "node"), bin: s.cl.bin, cl: s.cl,
		name: realNodeName, labels: "type=real",
		// The lane's node takes 10.88.96.0 - 10.88.127.255 (laneNode),
		// the pool's nodes from 10.88.128.0 up (poolNode).
		rangeStart: "10.88.0.2", rangeEnd: "10.88.95.254",
	}
	t0 := time.Now()
	if os.Geteuid() != 0 {
		return n, errors.New("the real node needs root (cgroups, network namespaces, iptables)")
	}
	for _, need := range realNodeNeeds {
		if strings.HasPrefix(need.path, "/") {
			if !fileExists(need.path) {
				return n, fmt.Errorf("no %s: install %s", need.path, need.from)
			}
		} else if _, err := exec.LookPath(need.path); err != nil {
			return n, fmt.Errorf("no %s on PATH: install %s", need.path, need.from)
		}
	}
	for _, b := range []string{"kubelet", "kube-proxy", "coredns", "kube-router"} {
		if !fileExists(n.binary(b)) {
			return n, fmt.Errorf("no %s in %s: run hack/cluster-tools.sh node", b, n.bin)
		}
	}
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet", "pods", "volumes"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return n, err
		}
	}
	// A suite killed before its cleanup leaves containers running on the
	// bridge (their shims outlive containerd, and their processes the shims):
	// they would hold addresses the new pods get. Only one suite runs on a
	// machine at a time.
	_ = exec.CommandContext(ctx, "pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*function-database-e2e-").Run()
	killKubepods()
	removePodNetns()
	if err := n.network(ctx); err != nil {
		return n, fmt.Errorf("pod network: %w", err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	logf("real node: containerd up (%s)", time.Since(t0).Round(time.Millisecond))
	if err := n.importImages(ctx, s); err != nil {
		return n, fmt.Errorf("images: %w", err)
	}
	logf("real node: images imported (%s)", time.Since(t0).Round(time.Millisecond))
	if err := n.startKubelet(ctx); err != nil {
		return n, err
	}
	logf("real node: kubelet registered %s Ready (%s)", realNodeName, time.Since(t0).Round(time.Millisecond))
	if err := n.startProxy(ctx); err != nil {
		return n, err
	}
	if err := n.exposeAPI(ctx); err != nil {
		return n, fmt.Errorf("the API server to the pods: %w", err)
	}
	if err := n.startDNS(ctx); err != nil {
		return n, err
	}
	if err := n.startRouter(ctx); err != nil {
		return n, err
	}
	logf("real node: kube-proxy, CoreDNS, kube-router up (%s)", time.Since(t0).Round(time.Millisecond))
	return n, nil
}

func (n *node) binary(name string) string { return filepath.Join(n.bin, name) }

// trustRegistry lets the node's containerd pull from an HTTPS registry at
// host (HOST:PORT) whose certificate the CA in caFile signed; nothing else
// on the machine trusts that CA.
func (n *node) trustRegistry(host, caFile string) error {
	return n.mirrorRegistry(host, host, caFile)
}

func (n *node) path(parts ...string) string {
	return filepath.Join(append([]string{n.dir}, parts...)...)
}

func (n *node) log() string { return filepath.Join(n.cl.dir, "logs", n.procName("node-setup")+".log") }

// procName is the name of one of the node's processes (and its log): the
// first node's keep their names, the pool's carry the node's.
func (n *node) procName(what string) string {
	if n.name == realNodeName {
		return what
	}
	return what + "-" + n.name
}

// sh runs a setup command; its output goes to the node's setup log.
func (n *node) sh(ctx context.Context, bin string, args ...string) error {
	if err := proc.Run(ctx, n.log(), n.dir, nil, bin, args...); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, proc.TailFile(n.log(), 5))
	}
	return nil
}

// network prepares the kernel and the bridge: br_netfilter so bridged pod
// traffic meets kube-proxy's and kube-router's iptables rules, forwarding
// (pod → Service → pod on the same bridge is routed), and a guard in the
// mangle table (before any filter rule can accept) that drops pod traffic to
// or from anything outside the pod network.
func (n *node) network(ctx context.Context) error {
	if !fileExists("/proc/sys/net/bridge") {
		_ = n.sh(ctx, "modprobe", "br_netfilter")
	}
	for k, v := range map[string]string{
		"net/ipv4/ip_forward":                       "1",
		"net/bridge/bridge-nf-call-iptables":        "1",
		"net/bridge/bridge-nf-call-ip6tables":       "1",
		"net/ipv4/conf/all/route_localnet":          "0",
		"net/netfilter/nf_conntrack_tcp_be_liberal": "1",
	} {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil && k != "net/netfilter/nf_conntrack_tcp_be_liberal" {
			return fmt.Errorf("sysctl %s: %w", k, err)
		}
	}
	if err := n.sh(ctx, "ip", "link", "show", bridgeName); err != nil {
		if err := n.sh(ctx, "ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	_ = exec.CommandContext(ctx, "ip", "addr", "add", bridgeIP+"/16", "dev", bridgeName).Run() // exists on a second run
	if err := n.sh(ctx, "ip", "link", "set", bridgeName, "up"); err != nil {
		return err
	}
	n.unguard()
	for _, args := range [][]string{
		{"-t", "mangle", "-N", guardChain},
		{"-t", "mangle", "-A", guardChain, "-s", podCIDR, "-d", podCIDR, "-j", "RETURN"},
		{"-t", "mangle", "-A", guardChain, "-s", podCIDR, "-j", "DROP"},
		{"-t", "mangle", "-A", guardChain, "-d", podCIDR, "-j", "DROP"},
		{"-t", "mangle", "-I", "FORWARD", "1", "-j", guardChain},
	} {
		if err := n.sh(ctx, "iptables", args...); err != nil {
			return err
		}
	}
	n.guard = true
	return nil
}

func (n *node) unguard() {
	for _, args := range [][]string{
		{"-t", "mangle", "-D", "FORWARD", "-j", guardChain},
		{"-t", "mangle", "-F", guardChain},
		{"-t", "mangle", "-X", guardChain},
	} {
		_ = exec.Command("iptables", args...).Run()
	}
}

func (n *node) startContainerd(ctx context.Context) error {
	n.sock = n.path("containerd", "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This machine's processes lack CAP_SYS_RESOURCE: a negative oom_score_adj
  # is refused and every sandbox would fail without this.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  # Read at each pull: trustRegistry adds hosts there while containerd runs.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.sock, n.sock+".ttrpc",
		n.path("containerd", "opt"), pauseImage, n.path("cni", "net.d"), n.path("containerd", "certs.d"))
	if err := os.WriteFile(n.path("containerd", "config.toml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	// No masquerade, no port mapping: pods talk to pods, Services and the
	// node's DNS on the bridge, nothing else.
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "fdb-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q, "rangeStart": %q, "rangeEnd": %q, "gateway": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, bridgeName, n.path("cni", "ipam"), podCIDR, n.rangeStart, n.rangeEnd, bridgeIP)
	if err := os.WriteFile(n.path("cni", "net.d", "10-fdb-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	n.containerd = proc.New(n.cl.dir, n.procName("containerd"), "containerd", "--config", n.path("containerd", "config.toml"), "--log-level", "info")
	return n.runContainerd(ctx)
}

// runContainerd starts the node's containerd (again, after kill) and waits
// until it answers.
func (n *node) runContainerd(ctx context.Context) error {
	if err := n.containerd.Start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return retry(wctx, 60*time.Second, func() error {
		if ended, err := n.containerd.Exited(); ended {
			return fmt.Errorf("containerd exited: %w", err)
		}
		return exec.CommandContext(wctx, "ctr", "--address", n.sock, "version").Run()
	})
}

// importImages makes the pause, PostgreSQL and postgres_exporter images (one
// layer each, no registry) and imports them into containerd's k8s.io
// namespace, where the CRI looks. The PostgreSQL image is cached next to its
// root filesystem; the other two are small enough to make on every run.
func (n *node) importImages(ctx context.Context, s *suite) error {
	imgDir := n.path("images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	// pause: a static Go binary.
	pauseBin := filepath.Join(imgDir, "pause")
	if err := proc.Run(ctx, n.log(), filepath.Join(s.root, "e2e"), []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", pauseBin, "./internal/pause"); err != nil {
		return fmt.Errorf("go build pause: %w\n%s", err, proc.TailFile(n.log(), 10))
	}
	pauseLayer, err := layerOf(map[string]string{"pause": pauseBin})
	if err != nil {
		return err
	}
	pauseTar := filepath.Join(imgDir, "pause.tar")
	if err := writeImage(pauseTar, pauseLayer, v1.Config{Entrypoint: []string{"/pause"}}, []string{pauseImage}); err != nil {
		return err
	}

	// postgres_exporter: the static binary hack/tools.sh built into the
	// tools folder. No user in the image (the pod's securityContext sets
	// runAsUser), no shell, no /etc: it needs none.
	exporterBin := n.binary("postgres_exporter")
	if !fileExists(exporterBin) {
		return fmt.Errorf("no postgres_exporter in %s: run hack/tools.sh postgres_exporter", n.bin)
	}
	exporterLayer, err := layerOf(map[string]string{"bin/postgres_exporter": exporterBin})
	if err != nil {
		return err
	}
	exporterTar := filepath.Join(imgDir, "postgres-exporter.tar")
	if err := writeImage(exporterTar, exporterLayer, v1.Config{Entrypoint: []string{"/bin/postgres_exporter"}}, []string{exporterImage}); err != nil {
		return err
	}

	// PostgreSQL: the rootfs from hack/node-images.sh, laid out like the
	// official image; its server binaries on PATH as there.
	out, err := proc.Output(ctx, n.log(), s.root, "bash", "hack/node-images.sh")
	if err != nil {
		return fmt.Errorf("hack/node-images.sh: %w\n%s", err, proc.TailFile(n.log(), 10))
	}
	rootfs, err := filepath.EvalSymlinks(filepath.Join(strings.TrimSpace(lastLine(out)), "postgres-15.tar"))
	if err != nil {
		return err
	}
	pgTar := strings.TrimSuffix(rootfs, ".tar") + ".image.tar"
	if !fileExists(pgTar) {
		layer, err := tarball.LayerFromFile(rootfs)
		if err != nil {
			return err
		}
		cfg := v1.Config{
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/15/bin",
				"LANG=C.UTF-8",
				"PGDATA=/var/lib/postgresql/data",
			},
			Cmd:        []string{"postgres"},
			StopSignal: "SIGINT",
		}
		// mmdebstrap empties /run at the end: the socket folder of the
		// official image (postgres-owned, sticky, world-writable) goes in a
		// layer of its own.
		run, err := dirLayer("run/postgresql", 999, 0o3777)
		if err != nil {
			return err
		}
		if err := writeImage(pgTar+".partial", layer, cfg, []string{postgresImage, postgresMinor}, run); err != nil {
			return err
		}
		if err := os.Rename(pgTar+".partial", pgTar); err != nil {
			return err
		}
	}
	n.tars = []string{pauseTar, exporterTar, pgTar}
	return n.importTars(ctx)
}

// importTars imports n.tars into containerd's k8s.io namespace, where the
// CRI looks.
func (n *node) importTars(ctx context.Context) error {
	for _, tar := range n.tars {
		if err := n.sh(ctx, "ctr", "--address", n.sock, "-n", "k8s.io", "images", "import", "--all-platforms", tar); err != nil {
			return err
		}
	}
	return nil
}

// layerOf makes a layer of files (name in the image → path here), mode 0755,
// with an entry for each parent folder (root-owned, 0755): without one the
// unpacker makes it with modes of its own choosing, and a non-root user must
// be able to traverse it.
func layerOf(files map[string]string) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (rc io.ReadCloser, err error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			dirs := map[string]bool{}
			for name, path := range files {
				for i := range len(name) {
					if name[i] != '/' || dirs[name[:i+1]] {
						continue
					}
					dirs[name[:i+1]] = true
					if err := tw.WriteHeader(&tar.Header{Name: name[:i+1], Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
						pw.CloseWithError(err)
						return
					}
				}
				data, err := os.ReadFile(path)
				if err != nil {
					pw.CloseWithError(err)
					return
				}
				if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
					pw.CloseWithError(err)
					return
				}
				if _, err := tw.Write(data); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			pw.CloseWithError(tw.Close())
		}()
		return pr, nil
	})
}

// dirLayer makes a layer holding one folder (and its parents, root-owned).
func dirLayer(dir string, uid int, mode int64) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	parts := strings.Split(dir, "/")
	for i := range parts {
		h := &tar.Header{Name: strings.Join(parts[:i+1], "/") + "/", Typeflag: tar.TypeDir, Mode: 0o755}
		if i == len(parts)-1 {
			h.Uid, h.Gid, h.Mode = uid, uid, mode
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

func writeImage(path string, layer v1.Layer, cfg v1.Config, refs []string, more ...v1.Layer) error {
	img, err := mutate.AppendLayers(empty.Image, append([]v1.Layer{layer}, more...)...)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tags := map[name.Tag]v1.Image{}
	for _, r := range refs {
		t, err := name.NewTag(r)
		if err != nil {
			return err
		}
		tags[t] = img
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tarball.MultiWrite(tags, f); err != nil {
		return err
	}
	return f.Close()
}

func (n *node) startKubelet(ctx context.Context) error {
	crt, key, err := n.cl.pki.CA.Issue(pki.CertSpec{CommonName: "system:node:" + n.name, Organizations: []string{"system:nodes"}, Client: true})
	if err != nil {
		return err
	}
	kcfg, err := n.kubeconfig("kubelet", crt, key)
	if err != nil {
		return err
	}
	port, err := proc.FreePort()
	if err != nil {
		return err
	}
	healthz, err := proc.FreePort()
	if err != nil {
		return err
	}
	// An empty resolv.conf: pods get the cluster DNS and its search path,
	// none of this machine's.
	resolv := n.path("resolv.conf")
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The API server reaches the kubelet (logs, exec) at the node's InternalIP:
# the bridge address, on this machine only.
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
# The machine's cgroups are v1 (hybrid): allowed, with the cgroupfs driver.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
resolvConf: %s
clusterDNS: [%s]
clusterDomain: cluster.local
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
registerWithTaints:
- {key: %s, value: "true", effect: NoSchedule}
# The suite's images are imported, never pulled: image GC must never remove
# them, and disk pressure must not evict the databases on a busy CI disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusReportFrequency: 10s
maxPods: 40
`, bridgeIP, port, healthz, n.sock, n.path("pods"), resolv, bridgeIP, n.cl.pki.CACert, realNodeTaint)
	if n.cgroupRoot != "" {
		cfg += "cgroupRoot: " + n.cgroupRoot + "\n"
	}
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	n.kubelet = proc.New(n.cl.dir, n.procName("kubelet"), n.binary("kubelet"),
		"--config="+n.path("kubelet.yaml"),
		"--kubeconfig="+kcfg,
		"--root-dir="+n.path("kubelet"),
		"--hostname-override="+n.name,
		"--node-ip="+bridgeIP,
		"--node-labels="+n.labels,
		"--v=1",
	)
	return n.runKubelet(ctx)
}

// runKubelet starts the node's kubelet (again, after kill) and waits until
// its Node is Ready.
func (n *node) runKubelet(ctx context.Context) error {
	if err := n.kubelet.Start(); err != nil {
		return err
	}
	return retry(ctx, 120*time.Second, func() error {
		if ended, err := n.kubelet.Exited(); ended {
			return fmt.Errorf("kubelet exited: %w\n%s", err, n.kubelet.Tail(20))
		}
		nd, err := n.cl.kube.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
		if nodeReady(nd) {
			return nil
		}
		return fmt.Errorf("node %s not Ready: %v", n.name, nd.Status.Conditions)
	})
}

// nodeReady tells whether the Node's Ready condition is True.
func nodeReady(nd *corev1.Node) bool {
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (n *node) kubeconfig(who string, crt, key []byte) (string, error) {
	c, k := n.path(who+".crt"), n.path(who+".key")
	if err := os.WriteFile(c, crt, 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(k, key, 0o600); err != nil {
		return "", err
	}
	path := n.path(who + ".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %s, certificate-authority: %s}
users:
- name: %s
  user: {client-certificate: %s, client-key: %s}
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, n.cl.host, n.cl.pki.CACert, who, c, k, who)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

func (n *node) startProxy(ctx context.Context) error {
	health, err := proc.FreePort()
	if err != nil {
		return err
	}
	metrics, err := proc.FreePort()
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
# Leave the machine's conntrack table size alone.
conntrack: {maxPerCore: 0}
`, n.cl.kcfg, realNodeName, podCIDR, health, metrics)
	if err := os.WriteFile(n.path("kube-proxy.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	n.proxy = proc.New(n.cl.dir, "kube-proxy", n.binary("kube-proxy"), "--config="+n.path("kube-proxy.yaml"), "--v=1")
	if err := n.proxy.Start(); err != nil {
		return err
	}
	return proc.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", health), nil, n.proxy)
}

// exposeAPI lets the pods reach the API server as in any cluster: through
// the kubernetes Service (10.0.0.1:443, KUBERNETES_SERVICE_HOST and _PORT in
// every container). The API server listens on 127.0.0.1 only, which no pod
// reaches, and manages no endpoints of its own (--endpoint-reconciler-type
// none): a forwarder on the bridge address (on this machine only, like
// CoreDNS) and the Service's EndpointSlice pointing at it. The instances'
// isolation fence takes the API server for its witness (scripts/lib.sh
// isolation_witness): without this, every pod here would look cut off from
// the control plane.
func (n *node) exposeAPI(ctx context.Context) error {
	u, err := url.Parse(n.cl.host)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(bridgeIP, u.Port()))
	if err != nil {
		return err
	}
	n.api = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go forward(c, u.Host)
		}
	}()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "function-database-e2e"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{bridgeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = n.cl.kube.cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = nil
	}
	return err
}

// forward copies c to and from a new connection to addr, until either ends.
func forward(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (n *node) startDNS(ctx context.Context) error {
	health, err := proc.FreePort()
	if err != nil {
		return err
	}
	ready, err := proc.FreePort()
	if err != nil {
		return err
	}
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes cluster.local %s {
        kubeconfig %s
        pods insecure
        ttl 5
    }
    cache 5
}
`, bridgeIP, health, ready, serviceCIDR, n.cl.kcfg)
	if err := os.WriteFile(n.path("Corefile"), []byte(corefile), 0o644); err != nil {
		return err
	}
	n.dns = proc.New(n.cl.dir, "coredns", n.binary("coredns"), "-conf", n.path("Corefile"))
	if err := n.dns.Start(); err != nil {
		return err
	}
	if err := proc.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/ready", ready), nil, n.dns); err != nil {
		return err
	}
	// The API server's own Service resolves: the plugin has synced.
	r := clusterResolver()
	return retry(ctx, 30*time.Second, func() error {
		_, err := r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
		return err
	})
}

// clusterResolver asks the node's CoreDNS, as pods (and Crossplane core,
// functionInPod) do; the rest of the machine keeps its own resolver.
func clusterResolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(bridgeIP, "53"))
	}}
}

// startRouter runs kube-router's NetworkPolicy firewall only (iptables and
// ipset; no routing, no service proxy: kube-proxy does that).
func (n *node) startRouter(ctx context.Context) error {
	health, err := proc.FreePort()
	if err != nil {
		return err
	}
	n.router = proc.New(n.cl.dir, "kube-router", n.binary("kube-router"),
		"--kubeconfig="+n.cl.kcfg,
		"--hostname-override="+realNodeName,
		"--run-firewall=true",
		"--run-router=false",
		"--run-service-proxy=false",
		"--run-loadbalancer=false",
		"--enable-cni=false",
		"--enable-ipv4=true",
		"--enable-ipv6=false",
		"--service-cluster-ip-range="+serviceCIDR,
		"--iptables-sync-period=5s",
		"--health-port="+strconv.Itoa(health),
		"--metrics-port=0",
		"--v=1",
	)
	if err := n.router.Start(); err != nil {
		return err
	}
	return proc.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", health), nil, n.router)
}

// stop stops the node's processes by PID (the kubelet first, so it starts no
// new containers), then every container containerd still runs, then the
// iptables rules and the bridge.
func (n *node) stop() {
	if n.api != nil {
		_ = n.api.Close()
	}
	for _, p := range []*proc.Proc{n.router, n.dns, n.proxy, n.kubelet} {
		if p != nil {
			p.Stop(k8sStop)
		}
	}
	if n.containerd != nil && n.sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		n.removePods(ctx)
		cancel()
		n.containerd.Stop(k8sStop)
	}
	// Shims outlive containerd: kill any left in our state folder, and any
	// container process left in the kubelet's cgroups.
	_ = exec.Command("pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*"+regexp.QuoteMeta(n.path("containerd", "state"))).Run()
	killKubepods()
	if n.proxy != nil {
		_ = exec.Command(n.binary("kube-proxy"), "--cleanup").Run()
	}
	if n.router != nil {
		_ = exec.Command(n.binary("kube-router"), "--cleanup-config").Run()
	}
	if n.guard {
		n.unguard()
	}
	_ = exec.Command("ip", "link", "del", bridgeName).Run()
	removePodNetns()
	// Unmount what the kubelet and containerd left mounted in our folder so
	// the suite can delete it.
	unmountUnder(n.dir)
}

// removePods stops and removes every pod sandbox through the CRI (crictl is
// not needed: ctr's task and container commands on the k8s.io namespace).
func (n *node) removePods(ctx context.Context) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "list", "-q").Output()
	if err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(ctx, "ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).Run()
		}
		time.Sleep(time.Second)
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(ctx, "ctr", "--address", n.sock, "-n", "k8s.io", "tasks", "delete", "-f", id).Run()
		}
	}
}

// removePodNetns deletes the pods' network namespaces that no process uses
// any more. The pods die by SIGKILL above, not through the CRI, so the CNI
// plugin never deletes their namespaces; left behind, their addresses
// collided with the next run's pods on the same bridge subnet.
func removePodNetns() {
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
	for _, pid := range kubepodsPIDs("") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// cgroupV1 is where the cgroup v1 hierarchies are mounted.
const cgroupV1 = "/sys/fs/cgroup"

// kubepodsRoots are the pod cgroups of every kubelet of the suite in the
// pids hierarchy: the first node's (cgroupRoot /) and the pool's
// (cgroupRoot /e2e-<node>), including a killed run's.
func kubepodsRoots() []string {
	roots := []string{filepath.Join(cgroupV1, "pids", "kubepods")}
	more, _ := filepath.Glob(filepath.Join(cgroupV1, "pids", "e2e-*", "kubepods"))
	return append(roots, more...)
}

// kubepods is this node's pod cgroup in the pids hierarchy.
func (n *node) kubepods() string {
	return filepath.Join(cgroupV1, "pids", n.cgroupRoot, "kubepods")
}

// kubepodsPIDs are the processes in the kubelets' pod cgroups (cgroup v1,
// cgroupfs driver: .../pod<UID>/...), of every node, of the pod with this
// UID only unless uid is empty, each once.
func kubepodsPIDs(uid string) []int {
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
		data, err := os.ReadFile(p)
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

var unmountMu sync.Mutex

func unmountUnder(dir string) {
	unmountMu.Lock()
	defer unmountMu.Unlock()
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			mounts = append(mounts, f[1])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = exec.Command("umount", "-l", mounts[i]).Run()
	}
}
