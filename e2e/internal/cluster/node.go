package cluster

import (
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
	"strconv"
	"strings"
	"syscall"
	"time"

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
// by the suite's realNamespace (a node selector and a toleration of its
// taint, added by the API server's PodNodeSelector and
// PodTolerationRestriction admission); every other pod stays on the kwok
// node.
const (
	// RealNodeName is the first real node's name ([StartNode]).
	RealNodeName = "real-node"
	// RealNodeTaint is the key of the taint (value "true", NoSchedule)
	// every real node registers with: only the pods that tolerate it run
	// there.
	RealNodeTaint = "e2e.function-database/real-node"
	// The pod network is a bridge on this machine with no route or
	// masquerade out of it (a mangle-table guard drops what would leave).
	podCIDR    = "10.88.0.0/16"
	bridgeName = "fdb0"
	// BridgeIP is the bridge's address on this machine: the pods' gateway
	// and their DNS server (CoreDNS), every real node's InternalIP, and
	// where the pods reach the API server (through the kubernetes Service)
	// and what else the suite serves them.
	BridgeIP = "10.88.0.1"
	// bridgeMAC is the bridge's own hardware address, set once: a Linux
	// bridge whose address the kernel chose takes the lowest address of
	// its ports, so it changes whenever a pod whose veth has a lower one
	// comes or goes. A pod that learned the gateway's address meanwhile
	// (a neighbour probe answered in that window) then sends to an address
	// no port has once that pod is gone: its packets to this machine are
	// lost until its neighbour entry fails, tens of seconds. Twice in full
	// runs the function's pod learned a CronJob pod's veth address this
	// way six seconds before that pod ended, was deleted before its entry
	// healed, and its GOAWAY and FIN never reached Crossplane core, whose
	// connection to it then held every call for the 15 minutes of TCP
	// retransmissions (TestNodes/FunctionNodeDies, and every test after
	// it). Locally administered (02:), unicast.
	bridgeMAC   = "02:fd:b0:00:00:01"
	serviceCIDR = "10.0.0.0/24"
	guardChain  = "FDB-E2E-GUARD"

	pauseImage = "e2e.local/pause:1"
	// PostgresRepo is the repository of the PostgreSQL image the real
	// nodes import (hack/node-images.sh), never pulled.
	PostgresRepo = "e2e.local/postgres"
	// PostgresImage is the PostgreSQL 15 image the real nodes import.
	PostgresImage = PostgresRepo + ":15"
	// PostgresMinor is the same image under a newer minor tag, for the
	// minor-roll scenario.
	PostgresMinor = PostgresRepo + ":15.1"
	// ExporterImage is the metrics sidecar: postgres_exporter
	// (hack/tools.sh), its static binary alone at /bin/postgres_exporter.
	// The tag is the version hack/tools.sh pins (EXPORTER_VERSION).
	ExporterImage = "e2e.local/postgres-exporter:v0.17.1"
)

// Node is a real node: a kubelet and a containerd of its own, made by
// [StartNode] (the first node, which also runs the machine's kube-proxy,
// CoreDNS, kube-router and the API server's forwarder) or [StartExtraNode]
// (a node beside it).
type Node struct {
	// Name is the Node's; the first node is RealNodeName, the pool's
	// (TestNodes, nodes_realnode_test.go) are poolNode(i), the lane's
	// laneNodeName.
	Name string
	// Dir is the node's folder: containerd's root, state and registry
	// hosts (containerd/), the CNI configuration and addresses (cni/), the
	// kubelet's root (kubelet/), the pods' logs (pods/), the volumes the
	// provisioner makes for it (volumes/), its configuration files and
	// kubeconfigs. [Node.Path] names what is in it.
	Dir string

	bin  string
	cl   *Cluster
	sock string // containerd's socket
	// first is the first node's: it owns the machine's pod network.
	first bool

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

// Procs are the node's processes that were made: what the suite watches,
// measures and quotes the logs of.
func (n *Node) Procs() []*proc.Proc {
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

// StartNode starts the first real node, RealNodeName, in c.Dir/node: the pod
// network (the bridge, the kernel's settings and a guard against traffic
// leaving it), containerd with the suite's images imported (built from the
// repository at root: e2e/internal/pause and hack/node-images.sh), the
// kubelet, kube-proxy, the API server's forwarder for the pods, CoreDNS and
// kube-router. It needs root. It first kills what a suite killed before its
// cleanup left running (containers, pod network namespaces). It returns once
// every component answers and the Node is Ready; on an error it returns what
// it started too, for [Node.Stop] to stop.
func StartNode(ctx context.Context, c *Cluster, root string) (*Node, error) {
	n := &Node{
		Dir: filepath.Join(c.Dir, "node"), bin: c.Bin, cl: c, first: true,
		Name: RealNodeName, labels: "type=real",
		// The lane's node takes 10.88.96.0 - 10.88.127.255 (laneNode),
		// the pool's nodes from 10.88.128.0 up (poolNode).
		rangeStart: "10.88.0.2", rangeEnd: "10.88.95.254",
	}
	logf := c.logf
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
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return n, err
		}
	}
	// A suite killed before its cleanup leaves containers running on the
	// bridge (their shims outlive containerd, and their processes the shims):
	// they would hold addresses the new pods get. Only one suite runs on a
	// machine at a time.
	_ = exec.CommandContext(ctx, "pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*function-database-e2e-").Run()
	killKubepods()
	RemovePodNetns()
	if err := n.network(ctx); err != nil {
		return n, fmt.Errorf("pod network: %w", err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	logf("real node: containerd up (%s)", time.Since(t0).Round(time.Millisecond))
	if err := n.importImages(ctx, root); err != nil {
		return n, fmt.Errorf("images: %w", err)
	}
	logf("real node: images imported (%s)", time.Since(t0).Round(time.Millisecond))
	if err := n.startKubelet(ctx); err != nil {
		return n, err
	}
	logf("real node: kubelet registered %s Ready (%s)", RealNodeName, time.Since(t0).Round(time.Millisecond))
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

// ExtraNode is a real node beside the first one, as [StartExtraNode] is to
// start it: its name, labels and pod addresses.
type ExtraNode struct {
	// Name is the Node's name; its folder is Dir/nodes/<Name>, its cgroup
	// root /e2e-<Name>.
	Name string
	// Labels are the kubelet's --node-labels (key=value,...).
	Labels string
	// RangeStart and RangeEnd bound the node's pod addresses inside the
	// pod network (10.88.0.0/16), on the bridge the nodes share: no two
	// nodes' ranges may overlap, nor the first node's (10.88.0.2 -
	// 10.88.95.254).
	RangeStart, RangeEnd string
}

// StartExtraNode starts a real node beside the first one (a pool node, a
// lane): its own containerd with the first node's images, state, cgroup
// root and pod address range (on the shared bridge), and a kubelet
// registering the node with these labels; the first node's kube-proxy,
// CoreDNS and kube-router serve it too. It returns once the Node is Ready;
// on an error it returns what it started too, for [Node.Stop] to stop.
func StartExtraNode(ctx context.Context, first *Node, spec ExtraNode) (*Node, error) {
	c, name := first.cl, spec.Name
	n := &Node{
		Dir: filepath.Join(c.Dir, "nodes", name), bin: c.Bin, cl: c,
		Name:       name,
		labels:     spec.Labels,
		cgroupRoot: "/e2e-" + name,
		rangeStart: spec.RangeStart, rangeEnd: spec.RangeEnd,
		tars: first.tars,
	}
	if n.Dir != filepath.Dir(c.VolumesOf(name)) {
		return n, fmt.Errorf("node %s: its folder %s is not where the provisioner puts its volumes (%s)", name, n.Dir, c.VolumesOf(name))
	}
	t0 := time.Now()
	for _, d := range []string{"containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet", "pods", "volumes"} {
		if err := os.MkdirAll(n.Path(d), 0o755); err != nil {
			return n, err
		}
	}
	if err := n.makeCgroups(); err != nil {
		return n, fmt.Errorf("node %s: %w", name, err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, fmt.Errorf("node %s: %w", name, err)
	}
	if err := n.importTars(ctx); err != nil {
		return n, fmt.Errorf("node %s: images: %w", name, err)
	}
	if err := n.startKubelet(ctx); err != nil {
		return n, fmt.Errorf("node %s: %w", name, err)
	}
	c.logf("node %s Ready in %s", name, time.Since(t0).Round(time.Millisecond))
	return n, nil
}

func (n *Node) binary(name string) string { return filepath.Join(n.bin, name) }

// TrustRegistry lets the node's containerd pull from an HTTPS registry at
// host (HOST:PORT) whose certificate the CA in caFile signed; nothing else
// on the machine trusts that CA. containerd reads it at its next pull.
func (n *Node) TrustRegistry(host, caFile string) error {
	return n.MirrorRegistry(host, host, caFile)
}

// Path is the path of parts joined under the node's folder, Dir.
func (n *Node) Path(parts ...string) string {
	return filepath.Join(append([]string{n.Dir}, parts...)...)
}

func (n *Node) log() string { return filepath.Join(n.cl.Dir, "logs", n.procName("node-setup")+".log") }

// procName is the name of one of the node's processes (and its log): the
// first node's keep their names, the pool's carry the node's.
func (n *Node) procName(what string) string {
	if n.Name == RealNodeName {
		return what
	}
	return what + "-" + n.Name
}

// sh runs a setup command; its output goes to the node's setup log.
func (n *Node) sh(ctx context.Context, bin string, args ...string) error {
	if err := proc.Run(ctx, n.log(), n.Dir, nil, bin, args...); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, proc.TailFile(n.log(), 5))
	}
	return nil
}

// network prepares the kernel and the bridge: br_netfilter so bridged pod
// traffic meets kube-proxy's and kube-router's iptables rules, forwarding
// (pod → Service → pod on the same bridge is routed), and a guard in the
// mangle table (before any filter rule can accept) that drops pod traffic to
// or from anything outside the pod network.
func (n *Node) network(ctx context.Context) error {
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
	if err := n.sh(ctx, "ip", "link", "set", bridgeName, "address", bridgeMAC); err != nil {
		return err
	}
	_ = exec.CommandContext(ctx, "ip", "addr", "add", BridgeIP+"/16", "dev", bridgeName).Run() // exists on a second run
	if err := n.sh(ctx, "ip", "link", "set", bridgeName, "up"); err != nil {
		return err
	}
	// 3 is NET_ADDR_SET: the kernel no longer moves the address with the
	// ports (see bridgeMAC).
	b, err := os.ReadFile(filepath.Join("/sys/class/net", bridgeName, "addr_assign_type"))
	if err != nil {
		return fmt.Errorf("bridge %s: %w", bridgeName, err)
	}
	if t := strings.TrimSpace(string(b)); t != "3" {
		return fmt.Errorf("bridge %s: its hardware address is not fixed (addr_assign_type %s): it would follow its ports'", bridgeName, t)
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

func (n *Node) unguard() {
	for _, args := range [][]string{
		{"-t", "mangle", "-D", "FORWARD", "-j", guardChain},
		{"-t", "mangle", "-F", guardChain},
		{"-t", "mangle", "-X", guardChain},
	} {
		_ = exec.Command("iptables", args...).Run()
	}
}

func (n *Node) startContainerd(ctx context.Context) error {
	n.sock = n.Path("containerd", "containerd.sock")
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
  # Read at each pull: TrustRegistry adds hosts there while containerd runs.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, n.Path("containerd", "root"), n.Path("containerd", "state"), n.sock, n.sock+".ttrpc",
		n.Path("containerd", "opt"), pauseImage, n.Path("cni", "net.d"), n.Path("containerd", "certs.d"))
	if err := os.WriteFile(n.Path("containerd", "config.toml"), []byte(cfg), 0o644); err != nil {
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
`, bridgeName, n.Path("cni", "ipam"), podCIDR, n.rangeStart, n.rangeEnd, BridgeIP)
	if err := os.WriteFile(n.Path("cni", "net.d", "10-fdb-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	n.containerd = proc.New(n.cl.Dir, n.procName("containerd"), "containerd", "--config", n.Path("containerd", "config.toml"), "--log-level", "info")
	return n.runContainerd(ctx)
}

// runContainerd starts the node's containerd (again, after kill) and waits
// until it answers.
func (n *Node) runContainerd(ctx context.Context) error {
	if err := n.containerd.Start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return Retry(wctx, 60*time.Second, func() error {
		if ended, err := n.containerd.Exited(); ended {
			return fmt.Errorf("containerd exited: %w", err)
		}
		return exec.CommandContext(wctx, "ctr", "--address", n.sock, "version").Run()
	})
}

func (n *Node) startKubelet(ctx context.Context) error {
	crt, key, err := n.cl.PKI.CA.Issue(pki.CertSpec{CommonName: "system:node:" + n.Name, Organizations: []string{"system:nodes"}, Client: true})
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
	resolv := n.Path("resolv.conf")
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
`, BridgeIP, port, healthz, n.sock, n.Path("pods"), resolv, BridgeIP, n.cl.PKI.CACert, RealNodeTaint)
	if n.cgroupRoot != "" {
		cfg += "cgroupRoot: " + n.cgroupRoot + "\n"
	}
	if err := os.WriteFile(n.Path("kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	n.kubelet = proc.New(n.cl.Dir, n.procName("kubelet"), n.binary("kubelet"),
		"--config="+n.Path("kubelet.yaml"),
		"--kubeconfig="+kcfg,
		"--root-dir="+n.Path("kubelet"),
		"--hostname-override="+n.Name,
		"--node-ip="+BridgeIP,
		"--node-labels="+n.labels,
		"--v=1",
	)
	return n.runKubelet(ctx)
}

// runKubelet starts the node's kubelet (again, after kill) and waits until
// its Node is Ready.
func (n *Node) runKubelet(ctx context.Context) error {
	if err := n.kubelet.Start(); err != nil {
		return err
	}
	return Retry(ctx, 120*time.Second, func() error {
		if ended, err := n.kubelet.Exited(); ended {
			return fmt.Errorf("kubelet exited: %w\n%s", err, n.kubelet.Tail(20))
		}
		nd, err := n.cl.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if NodeReady(nd) {
			return nil
		}
		return fmt.Errorf("node %s not Ready: %v", n.Name, nd.Status.Conditions)
	})
}

func (n *Node) kubeconfig(who string, crt, key []byte) (string, error) {
	c, k := n.Path(who+".crt"), n.Path(who+".key")
	if err := os.WriteFile(c, crt, 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(k, key, 0o600); err != nil {
		return "", err
	}
	path := n.Path(who + ".kubeconfig")
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
`, n.cl.Host, n.cl.PKI.CACert, who, c, k, who)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

func (n *Node) startProxy(ctx context.Context) error {
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
`, n.cl.Kubeconfig, RealNodeName, podCIDR, health, metrics)
	if err := os.WriteFile(n.Path("kube-proxy.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	n.proxy = proc.New(n.cl.Dir, "kube-proxy", n.binary("kube-proxy"), "--config="+n.Path("kube-proxy.yaml"), "--v=1")
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
func (n *Node) exposeAPI(ctx context.Context) error {
	u, err := url.Parse(n.cl.Host)
	if err != nil {
		return err
	}
	port, err := strconv.ParseInt(u.Port(), 10, 32)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(BridgeIP, u.Port()))
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
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{BridgeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = n.cl.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
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

func (n *Node) startDNS(ctx context.Context) error {
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
`, BridgeIP, health, ready, serviceCIDR, n.cl.Kubeconfig)
	if err := os.WriteFile(n.Path("Corefile"), []byte(corefile), 0o644); err != nil {
		return err
	}
	n.dns = proc.New(n.cl.Dir, "coredns", n.binary("coredns"), "-conf", n.Path("Corefile"))
	if err := n.dns.Start(); err != nil {
		return err
	}
	if err := proc.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/ready", ready), nil, n.dns); err != nil {
		return err
	}
	// The API server's own Service resolves: the plugin has synced.
	r := Resolver()
	return Retry(ctx, 30*time.Second, func() error {
		_, err := r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
		return err
	})
}

// Resolver asks the first node's CoreDNS, as pods (and Crossplane core,
// functionInPod) do; the rest of the machine keeps its own resolver.
func Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(BridgeIP, "53"))
	}}
}

// startRouter runs kube-router's NetworkPolicy firewall only (iptables and
// ipset; no routing, no service proxy: kube-proxy does that).
func (n *Node) startRouter(ctx context.Context) error {
	health, err := proc.FreePort()
	if err != nil {
		return err
	}
	n.router = proc.New(n.cl.Dir, "kube-router", n.binary("kube-router"),
		"--kubeconfig="+n.cl.Kubeconfig,
		"--hostname-override="+RealNodeName,
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

// Stop stops the node and cleans up after it, whatever part of it started.
// The first node ([StartNode]) stops its processes by PID (the kubelet
// first, so it starts no new containers), then every container containerd
// still runs, then the iptables rules and the bridge. A node of
// [StartExtraNode] stops its kubelet, its containers and containerd, kills
// what is left, removes its cgroups and mounts, and deletes its Node (a
// failure to is logged through [Config.Logf]). Stop the extra nodes before
// the first: the first node's stop takes the pod network with it.
func (n *Node) Stop() {
	if !n.first {
		n.stopExtra()
		return
	}
	if n.api != nil {
		_ = n.api.Close()
	}
	for _, p := range []*proc.Proc{n.router, n.dns, n.proxy, n.kubelet} {
		if p != nil {
			p.Stop(StopGrace)
		}
	}
	if n.containerd != nil && n.sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		n.removePods(ctx)
		cancel()
		n.containerd.Stop(StopGrace)
	}
	// Shims outlive containerd: kill any left in our state folder, and any
	// container process left in the kubelet's cgroups.
	_ = exec.Command("pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*"+regexp.QuoteMeta(n.Path("containerd", "state"))).Run()
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
	RemovePodNetns()
	// Unmount what the kubelet and containerd left mounted in our folder so
	// the suite can delete it.
	unmountUnder(n.Dir)
}

// removePods stops and removes every pod sandbox through the CRI (crictl is
// not needed: ctr's task and container commands on the k8s.io namespace).
func (n *Node) removePods(ctx context.Context) {
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

// podNetns are the network namespaces (inode numbers) of the node's pods,
// read from their processes.
func (n *Node) podNetns() map[uint64]bool {
	out := map[uint64]bool{}
	for _, pid := range kubepodsPIDsUnder(n.kubepods(), "", nil) {
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil {
			out[st.Ino] = true
		}
	}
	return out
}

// Kill kills the node at once, as a machine that loses power: its pods'
// network links go down first, so that no process killed next closes a
// connection (a dead machine sends no FIN and no RST: its peers' connections
// stay open and unanswered, which is what a client without keepalives, as
// Crossplane core's, hangs on); then SIGKILL to its kubelet and its
// containerd, then to its shims and every process in its pod cgroups until
// none is left; then its pods' network namespaces go (their addresses with
// them). It returns how many processes it killed besides the kubelet and
// containerd.
//
// It is meant for a node of [StartExtraNode]: the first node's kube-proxy,
// CoreDNS and kube-router, which every node's pods use, are left running.
func (n *Node) Kill() (int, error) {
	netns := n.podNetns()
	if err := linksDown(netns); err != nil {
		return 0, fmt.Errorf("node %s: %w", n.Name, err)
	}
	n.kubelet.Kill()
	n.containerd.Kill()
	killed := map[int]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := append(n.shimPIDs(), kubepodsPIDsUnder(n.kubepods(), "", nil)...)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("node %s: processes still alive 30 s after SIGKILL: %v", n.Name, pids)
		}
		time.Sleep(20 * time.Millisecond) // until the kernel has reaped them
	}
	deleteNetns(netns)
	return len(killed), nil
}

// Revive starts the killed node's containerd and kubelet again (same
// configuration, same state) and waits until the Node is Ready.
func (n *Node) Revive(ctx context.Context) error {
	if err := n.runContainerd(ctx); err != nil {
		return err
	}
	return n.runKubelet(ctx)
}

// stopExtra stops the node's kubelet, its containers and containerd,
// kills what is left, removes its cgroups and mounts, and deletes its Node.
func (n *Node) stopExtra() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if n.kubelet != nil {
		n.kubelet.Stop(StopGrace)
	}
	if n.containerd != nil {
		if ended, _ := n.containerd.Exited(); !ended {
			n.removePods(ctx)
		}
		n.containerd.Stop(StopGrace)
	}
	for range 50 {
		pids := append(n.shimPIDs(), kubepodsPIDsUnder(n.kubepods(), "", nil)...)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond) // until the kernel has reaped them
	}
	n.removeCgroups()
	unmountUnder(n.Dir)
	if err := n.cl.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		n.cl.logf("pool: delete node %s: %v", n.Name, err)
	}
}

// MirrorRegistry makes the node's containerd pull images named host/... from
// the HTTPS registry at mirror (HOST:PORT) instead, trusting caFile for it
// (containerd/certs.d/<host>/hosts.toml, read at each pull).
func (n *Node) MirrorRegistry(host, mirror, caFile string) error {
	dir := n.Path("containerd", "certs.d", host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %q\n",
		"https://"+host, "https://"+mirror, caFile)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644)
}
