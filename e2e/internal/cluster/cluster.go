// Package cluster is the e2e suite's Kubernetes cluster on one machine: the
// control plane (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, every one a child process on 127.0.0.1, with a
// volume provisioner in the test binary) and the real nodes (a kubelet with
// containerd, runc and a CNI bridge; the first node also runs kube-proxy,
// CoreDNS, kube-router's NetworkPolicy firewall and a forwarder to the API
// server for the pods).
//
// The suite starts the control plane with [Start] in TestMain, with three
// fake nodes in three zones for kwok to run the pods on (more with
// [Cluster.KwokNode]), and stops it with [Cluster.Stop] at the end. Its
// scenarios reach the API server through [Cluster.Client] (the suite's own
// clients share [Cluster.RESTConfig]) and the admin kubeconfig
// [Cluster.Kubeconfig]; a scenario that must see a Database whose pods
// cannot be scheduled yet holds the provisioner back for its namespace
// ([Cluster.HoldVolumes]).
//
// The first real-node scenario starts the first real node with [StartNode]
// (it needs root: cgroups, network namespaces, iptables); pods land on it
// only from namespaces labelled [RealNamespaceLabel] that tolerate
// [RealNodeTaint]. TestNodes and the lane start more real nodes beside it
// with [StartExtraNode], each a kubelet and a containerd of its own;
// TestNodes kills some as a machine dies ([Node.Kill]) and brings them back
// ([Node.Revive]). Every node is stopped with [Node.Stop]. A scenario that
// stops or freezes a pod's processes from the host finds them in the
// kubelets' pod cgroups with [KubepodsPIDs].
//
// Everything lives in the run's temporary folder: logs/ (one log per
// process, see package proc), pki/, etcd/, node/ (the first node) and
// nodes/<name>/ (the others). The package is Linux-only, like the suite,
// and the nodes want cgroup v1 (the cgroupfs driver).
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
)

const (
	// StopGrace is how long a component of the cluster is given to stop
	// after SIGTERM before SIGKILL ([proc.Proc.Stop]).
	StopGrace = 10 * time.Second
	// PairLabel marks two of the three kwok nodes (see [Start]): a
	// namespace that selects it (the PodNodeSelector admission plugin) has
	// fewer nodes than a large Database has instances.
	PairLabel = "e2e.function-database/pair"
	// RealNamespaceLabel, "true" on a namespace, says its pods run on a real
	// node: the provisioner gives its claims real folders on the node
	// (hostPath volumes) rather than volumes nothing mounts.
	RealNamespaceLabel = "e2e.function-database/real-node"
)

// Config is what [Start] needs from the suite.
type Config struct {
	// Dir is the run's temporary folder: logs/, pki/, etcd/ and the real
	// nodes' folders go there.
	Dir string
	// Bin is the tools' folder (hack/cluster-tools.sh): etcd,
	// kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
	// kwok-stages.yaml; the real nodes' kubelet, kube-proxy, coredns,
	// kube-router and postgres_exporter.
	Bin string
	// Logf, when not nil, gets a line at each stage of a start (how long it
	// took), and what a stop could not do.
	Logf func(format string, args ...any)
}

// Cluster is the control plane: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, every one a child process on 127.0.0.1, made by
// [Start].
type Cluster struct {
	// Dir is the run's temporary folder ([Config.Dir]).
	Dir string
	// Bin is the tools' folder ([Config.Bin]).
	Bin string
	// PKI is the control plane's CA, certificates and keys (Dir/pki).
	PKI *pki.PKI
	// Kubeconfig is the path of the admin's kubeconfig, which the
	// controller manager, the scheduler, kwok, kube-proxy, CoreDNS and
	// kube-router use, and README's commands run with.
	Kubeconfig string
	// Host is the API server's URL: https://127.0.0.1:PORT.
	Host string
	// RESTConfig is the admin's client configuration (30 s timeout).
	RESTConfig *rest.Config
	// Client is the admin's clientset, made from RESTConfig with QPS 200
	// and burst 400: the provisioner's and the nodes', and the suite's.
	Client kubernetes.Interface

	logf func(string, ...any)

	etcd, apiserver, kcm, scheduler, kwok *proc.Proc

	// holdPVs holds back the volume provisioner for one namespace so a test
	// can observe a Database whose pods cannot be scheduled yet.
	holdPVs   atomic.Value // string namespace
	provStop  context.CancelFunc
	provDone  chan struct{}
	provMu    sync.Mutex
	provError error

	// realVolumes is where the real node's volumes live (one folder per
	// claim); realNS caches which namespaces are the real node's.
	realVolumes string
	realNS      sync.Map // namespace → bool
}

// Procs are the control plane's processes that were made, in order of start:
// what the suite watches, measures and quotes the logs of.
func (c *Cluster) Procs() []*proc.Proc {
	var out []*proc.Proc
	for _, p := range []*proc.Proc{c.etcd, c.apiserver, c.kcm, c.scheduler, c.kwok} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// Binary is the path of a tool in the tools' folder ([Cluster.Bin]).
func (c *Cluster) Binary(name string) string { return filepath.Join(c.Bin, name) }

// Start starts the control plane in cfg.Dir, from the binaries in cfg.Bin,
// and the volume provisioner. It returns once the API server is ready, the
// three kwok nodes are Ready and the controller manager works (the default
// ServiceAccount exists). On an error it returns what it started too, for
// [Cluster.Stop] to stop.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	dir := cfg.Dir
	c := newCluster(cfg)
	logf := c.logf
	var err error
	t0 := time.Now()
	if c.PKI, err = pki.New(filepath.Join(dir, "pki")); err != nil {
		return c, fmt.Errorf("pki: %w", err)
	}

	// etcd
	etcdClient, err := proc.FreePort()
	if err != nil {
		return c, err
	}
	etcdPeer, err := proc.FreePort()
	if err != nil {
		return c, err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	c.etcd = proc.New(dir, "etcd", c.Binary("etcd"),
		"--name=e2e",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		"--initial-cluster-state=new",
		"--listen-metrics-urls=",
		"--log-level=warn",
	)
	if err := c.etcd.Start(); err != nil {
		return c, err
	}
	if err := proc.WaitHTTP(ctx, clientURL+"/health", nil, c.etcd); err != nil {
		return c, err
	}
	logf("etcd up on %s (%s)", clientURL, time.Since(t0).Round(time.Millisecond))

	// kube-apiserver
	apiPort, err := proc.FreePort()
	if err != nil {
		return c, err
	}
	c.Host = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	c.apiserver = proc.New(dir, "kube-apiserver", c.Binary("kube-apiserver"),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--etcd-servers="+clientURL,
		"--endpoint-reconciler-type=none",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--client-ca-file="+c.PKI.CACert,
		"--tls-cert-file="+c.PKI.APIServerCert,
		"--tls-private-key-file="+c.PKI.APIServerKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.PKI.ServiceAccountPub,
		"--service-account-signing-key-file="+c.PKI.ServiceAccountKey,
		"--allow-privileged=true",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
		// Pods reach the real node only from namespaces that ask for it
		// (node selector and taint toleration per namespace, see node.go).
		"--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
		// Logs and exec on the real node's pods go through its kubelet.
		"--kubelet-client-certificate="+c.PKI.AdminCert,
		"--kubelet-client-key="+c.PKI.AdminKey,
		"--kubelet-preferred-address-types=InternalIP",
		// The API server turns a watch from resourceVersion 0 (kwok's) into
		// a streaming list, which needs etcd progress requests (etcd
		// 3.4.31+); Debian's etcd 3.4.23 has none, so such watches fail and
		// kwok sees pods only at its backed-off relists (tens of seconds).
		"--feature-gates=WatchList=false",
		"--v=1",
	)
	if err := c.apiserver.Start(); err != nil {
		return c, err
	}
	if c.Kubeconfig, err = c.PKI.Kubeconfig(c.Host); err != nil {
		return c, err
	}
	c.RESTConfig = &rest.Config{
		Host: c.Host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.PKI.CAPEM,
			CertData: c.PKI.AdminCertPEM,
			KeyData:  c.PKI.AdminKeyPEM,
		},
		Timeout: 30 * time.Second,
	}
	tlsCfg, err := rest.TLSConfigFor(c.RESTConfig)
	if err != nil {
		return c, err
	}
	if err := proc.WaitHTTP(ctx, c.Host+"/readyz", tlsCfg, c.apiserver); err != nil {
		return c, err
	}
	logf("kube-apiserver ready on %s (%s)", c.Host, time.Since(t0).Round(time.Millisecond))
	if c.Client, err = newClient(c.RESTConfig); err != nil {
		return c, err
	}

	// kube-controller-manager: the StatefulSet controller (pods, PVCs), the
	// garbage collector (XR deletion), the PV binder (our provisioner's PVs).
	c.kcm = proc.New(dir, "kube-controller-manager", c.Binary("kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--service-account-private-key-file="+c.PKI.ServiceAccountKey,
		"--root-ca-file="+c.PKI.CACert,
		"--cluster-signing-cert-file="+c.PKI.CACert,
		"--cluster-signing-key-file="+c.PKI.CAKey,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--pvclaimbinder-sync-period=2s",
		// A node that stops renewing its lease (TestNodes kills one) is
		// NotReady after 20 s instead of 50: within the failover's RTO.
		// The kubelets renew every 10 s, kwok every 10 s (its flag below).
		"--node-monitor-grace-period=20s",
		"--v=1",
	)
	c.scheduler = proc.New(dir, "kube-scheduler", c.Binary("kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig,
		"--authentication-kubeconfig="+c.Kubeconfig,
		"--authorization-kubeconfig="+c.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--v=1",
	)
	c.kwok = proc.New(dir, "kwok", c.Binary("kwok"),
		"--kubeconfig="+c.Kubeconfig,
		// Only the fake node: the real node's kubelet runs its own pods.
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-ip=127.0.0.1",
		"--cidr=10.244.0.0/16",
		// Leases renewed every 10 s (a quarter of the duration): without
		// them kwok's only heartbeat is the node status every 20-45 s,
		// longer than the controller manager's grace above.
		"--node-lease-duration-seconds=40",
		"--config="+c.Binary("kwok-stages.yaml"),
		"--v=INFO",
	)
	for _, p := range []*proc.Proc{c.kcm, c.scheduler, c.kwok} {
		if err := p.Start(); err != nil {
			return c, err
		}
	}

	// Fake nodes for kwok to run the pods on, one per zone, so that
	// instances required on nodes of their own (spread, the default) have
	// them. Two carry PairLabel: a namespace that selects it (the
	// PodNodeSelector admission plugin) has fewer nodes than a large
	// Database has instances.
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		name := fmt.Sprintf("kwok-node-%d", i)
		if err := c.KwokNode(ctx, name, zone, i < 2); err != nil {
			return c, err
		}
	}
	// The default ServiceAccount is what the StatefulSet's pods need to be
	// admitted: wait for KCM's service account controller to be running.
	if err := Retry(ctx, 60*time.Second, func() error {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return c, fmt.Errorf("kube-controller-manager not working (no default ServiceAccount): %w", err)
	}
	logf("controller-manager, scheduler, kwok up; nodes Ready (%s)", time.Since(t0).Round(time.Millisecond))

	c.startProvisioner()
	return c, nil
}

// newCluster is a Cluster of cfg with nothing started.
func newCluster(cfg Config) *Cluster {
	c := &Cluster{Dir: cfg.Dir, Bin: cfg.Bin, logf: cfg.Logf, realVolumes: filepath.Join(cfg.Dir, "node", "volumes")}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	c.holdPVs.Store("")
	return c
}

// startProvisioner starts the volume provisioner (provision), until Stop.
func (c *Cluster) startProvisioner() {
	pctx, cancel := context.WithCancel(context.Background())
	c.provStop, c.provDone = cancel, make(chan struct{})
	go c.provision(pctx)
}

// newClient is the clientset of cfg with the suite's client-side rate limit
// (QPS 200, burst 400): the suite creates hundreds of objects at once.
func newClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	return kubernetes.NewForConfig(cfg)
}

// KwokNode registers a fake node in zone for kwok to run pods on, and waits
// until kwok reports it Ready; pair adds [PairLabel].
func (c *Cluster) KwokNode(ctx context.Context, name, zone string, pair bool) error {
	labels := map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
		corev1.LabelTopologyZone: zone,
	}
	if pair {
		labels[PairLabel] = "true"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      labels,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
	}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if err := Retry(ctx, 10*time.Second, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return Retry(ctx, 60*time.Second, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if NodeReady(n) {
			return nil
		}
		for _, p := range []*proc.Proc{c.kcm, c.scheduler, c.kwok} {
			if ended, err := p.Exited(); ended {
				return fmt.Errorf("%s exited: %w", p.Name, err)
			}
		}
		return fmt.Errorf("node %s not Ready (kwok)", name)
	})
}

// NodeReady tells whether the Node's Ready condition is True.
func NodeReady(nd *corev1.Node) bool {
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Stop stops the provisioner, then every process by PID, in reverse order
// of start. The real nodes are stopped before it ([Node.Stop]).
func (c *Cluster) Stop() {
	if c.provStop != nil {
		c.provStop()
		<-c.provDone
	}
	ps := c.Procs()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].Stop(StopGrace)
	}
}

// HoldVolumes holds back the volume provisioner for the claims of namespace
// ns, so that a test can observe a Database whose pods cannot be scheduled
// yet; "" releases it (the provisioner's resync, every 2 s, brings the
// namespace's claims back). One namespace at a time.
func (c *Cluster) HoldVolumes(ns string) { c.holdPVs.Store(ns) }

// Retry calls f until it succeeds or timeout; returns f's last error. It
// calls f every 500 ms, and gives up when ctx ends, with an error that
// wraps both ctx's error and f's last.
func Retry(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
