//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
)

const (
	k8sStop = 10 * time.Second
	// kwokPairLabel marks two of the three kwok nodes (kwokNode).
	kwokPairLabel = "e2e.function-database/pair"
)

// cluster is the control plane: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok, every one a child process on 127.0.0.1.
type cluster struct {
	dir  string
	bin  string
	pki  *pki.PKI
	kcfg string
	host string
	cfg  *rest.Config
	kube *kube

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

func (c *cluster) procs() []*proc.Proc {
	var out []*proc.Proc
	for _, p := range []*proc.Proc{c.etcd, c.apiserver, c.kcm, c.scheduler, c.kwok} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

func (c *cluster) binary(name string) string { return filepath.Join(c.bin, name) }

func startCluster(ctx context.Context, dir, bin string, logf func(string, ...any)) (*cluster, error) {
	c := &cluster{dir: dir, bin: bin, realVolumes: filepath.Join(dir, "node", "volumes")}
	c.holdPVs.Store("")
	var err error
	t0 := time.Now()
	if c.pki, err = pki.New(filepath.Join(dir, "pki")); err != nil {
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
	c.etcd = proc.New(dir, "etcd", c.binary("etcd"),
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
	c.host = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	c.apiserver = proc.New(dir, "kube-apiserver", c.binary("kube-apiserver"),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--etcd-servers="+clientURL,
		"--endpoint-reconciler-type=none",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--client-ca-file="+c.pki.CACert,
		"--tls-cert-file="+c.pki.APIServerCert,
		"--tls-private-key-file="+c.pki.APIServerKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+c.pki.ServiceAccountPub,
		"--service-account-signing-key-file="+c.pki.ServiceAccountKey,
		"--allow-privileged=true",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
		// Pods reach the real node only from namespaces that ask for it
		// (node selector and taint toleration per namespace, see node_test.go).
		"--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
		// Logs and exec on the real node's pods go through its kubelet.
		"--kubelet-client-certificate="+c.pki.AdminCert,
		"--kubelet-client-key="+c.pki.AdminKey,
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
	if c.kcfg, err = c.pki.Kubeconfig(c.host); err != nil {
		return c, err
	}
	c.cfg = &rest.Config{
		Host: c.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.CAPEM,
			CertData: c.pki.AdminCertPEM,
			KeyData:  c.pki.AdminKeyPEM,
		},
		Timeout: 30 * time.Second,
	}
	tlsCfg, err := rest.TLSConfigFor(c.cfg)
	if err != nil {
		return c, err
	}
	if err := proc.WaitHTTP(ctx, c.host+"/readyz", tlsCfg, c.apiserver); err != nil {
		return c, err
	}
	logf("kube-apiserver ready on %s (%s)", c.host, time.Since(t0).Round(time.Millisecond))
	if c.kube, err = newKube(c.cfg); err != nil {
		return c, err
	}

	// kube-controller-manager: the StatefulSet controller (pods, PVCs), the
	// garbage collector (XR deletion), the PV binder (our provisioner's PVs).
	c.kcm = proc.New(dir, "kube-controller-manager", c.binary("kube-controller-manager"),
		"--kubeconfig="+c.kcfg,
		"--authentication-kubeconfig="+c.kcfg,
		"--authorization-kubeconfig="+c.kcfg,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--service-account-private-key-file="+c.pki.ServiceAccountKey,
		"--root-ca-file="+c.pki.CACert,
		"--cluster-signing-cert-file="+c.pki.CACert,
		"--cluster-signing-key-file="+c.pki.CAKey,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--pvclaimbinder-sync-period=2s",
		// A node that stops renewing its lease (TestNodes kills one) is
		// NotReady after 20 s instead of 50: within the failover's RTO.
		// The kubelets renew every 10 s, kwok every 10 s (its flag below).
		"--node-monitor-grace-period=20s",
		"--v=1",
	)
	c.scheduler = proc.New(dir, "kube-scheduler", c.binary("kube-scheduler"),
		"--kubeconfig="+c.kcfg,
		"--authentication-kubeconfig="+c.kcfg,
		"--authorization-kubeconfig="+c.kcfg,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--v=1",
	)
	c.kwok = proc.New(dir, "kwok", c.binary("kwok"),
		"--kubeconfig="+c.kcfg,
		// Only the fake node: the real node's kubelet runs its own pods.
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-ip=127.0.0.1",
		"--cidr=10.244.0.0/16",
		// Leases renewed every 10 s (a quarter of the duration): without
		// them kwok's only heartbeat is the node status every 20-45 s,
		// longer than the controller manager's grace above.
		"--node-lease-duration-seconds=40",
		"--config="+c.binary("kwok-stages.yaml"),
		"--v=INFO",
	)
	for _, p := range []*proc.Proc{c.kcm, c.scheduler, c.kwok} {
		if err := p.Start(); err != nil {
			return c, err
		}
	}

	// Fake nodes for kwok to run the pods on, one per zone, so that
	// instances required on nodes of their own (spread, the default) have
	// them. Two carry kwokPairLabel: a namespace that selects it (the
	// PodNodeSelector admission plugin) has fewer nodes than a large
	// Database has instances.
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		name := fmt.Sprintf("kwok-node-%d", i)
		if err := c.kwokNode(ctx, name, zone, i < 2); err != nil {
			return c, err
		}
	}
	// The default ServiceAccount is what the StatefulSet's pods need to be
	// admitted: wait for KCM's service account controller to be running.
	if err := retry(ctx, 60*time.Second, func() error {
		_, err := c.kube.cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return c, fmt.Errorf("kube-controller-manager not working (no default ServiceAccount): %w", err)
	}
	logf("controller-manager, scheduler, kwok up; nodes Ready (%s)", time.Since(t0).Round(time.Millisecond))

	pctx, cancel := context.WithCancel(context.Background())
	c.provStop, c.provDone = cancel, make(chan struct{})
	go c.provision(pctx)
	return c, nil
}

// kwokNode registers a fake node in zone for kwok to run pods on, and waits
// until kwok reports it Ready; pair adds kwokPairLabel.
func (c *cluster) kwokNode(ctx context.Context, name, zone string, pair bool) error {
	labels := map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok",
		corev1.LabelTopologyZone: zone,
	}
	if pair {
		labels[kwokPairLabel] = "true"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      labels,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
	}}
	if _, err := c.kube.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if err := retry(ctx, 10*time.Second, func() error {
		n, err := c.kube.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		_, err = c.kube.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return retry(ctx, 60*time.Second, func() error {
		n, err := c.kube.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		for _, p := range []*proc.Proc{c.kcm, c.scheduler, c.kwok} {
			if ended, err := p.Exited(); ended {
				return fmt.Errorf("%s exited: %w", p.Name, err)
			}
		}
		return fmt.Errorf("node %s not Ready (kwok)", name)
	})
}

// stop stops every process by PID, in reverse order of start.
func (c *cluster) stop() {
	if c.provStop != nil {
		c.provStop()
		<-c.provDone
	}
	ps := c.procs()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].Stop(k8sStop)
	}
}

// provisionerName is the suite's volume provisioner, for StorageClasses
// whose claims wait for the scheduler (WaitForFirstConsumer).
const provisionerName = "e2e.function-database/hostpath"

// provision plays a volume provisioner, driven by a watch of the claims (an
// informer; its resync brings back the claims of a namespace holdPVs held):
// every Pending claim gets a PersistentVolume pre-bound to it (same class,
// size and access modes), which the controller manager's PV binder binds.
// A claim of a StorageClass with volumeBindingMode WaitForFirstConsumer
// waits for the scheduler to pick its pod's node (annotation
// volume.kubernetes.io/selected-node), and its volume is made on that node
// with that node's affinity, as local-path-provisioner does; any other claim
// is bound at once, on the first real node in a real namespace. Nothing is
// mounted for kwok, which runs no containers.
func (c *cluster) provision(ctx context.Context) {
	defer close(c.provDone)
	cs := c.kube.cs
	factory := informers.NewSharedInformerFactory(cs, 2*time.Second)
	claims := factory.Core().V1().PersistentVolumeClaims()
	classes := factory.Storage().V1().StorageClasses()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(o any) {
		if pvc, ok := o.(*corev1.PersistentVolumeClaim); ok && pvc.Status.Phase == corev1.ClaimPending && pvc.Spec.VolumeName == "" {
			queue.Add(pvc.Namespace + "/" + pvc.Name)
		}
	}
	_, _ = claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
	})
	_ = classes.Informer() // registered before Start
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, quit := queue.Get()
		if quit {
			factory.Shutdown()
			return
		}
		ns, name, _ := strings.Cut(key, "/")
		pvc, err := claims.Lister().PersistentVolumeClaims(ns).Get(name)
		if err == nil {
			err = c.provisionClaim(ctx, pvc, classes.Lister())
		}
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			c.provMu.Lock()
			c.provError = err
			c.provMu.Unlock()
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

// provisionClaim makes the volume of one claim, if it is Pending and its
// turn has come.
func (c *cluster) provisionClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, classes storagelisters.StorageClassLister) error {
	hold, _ := c.holdPVs.Load().(string)
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Namespace == hold {
		return nil
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	// The first real node unless the scheduler picks (WaitForFirstConsumer).
	node := realNodeName
	if class != "" {
		sc, err := classes.Get(class)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if sc != nil && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
			if sc.Provisioner != provisionerName {
				return nil
			}
			node = pvc.Annotations["volume.kubernetes.io/selected-node"]
			if node == "" {
				return nil // the scheduler has not picked a node yet
			}
		}
	}
	mode := corev1.PersistentVolumeFilesystem
	if pvc.Spec.VolumeMode != nil {
		mode = *pvc.Spec.VolumeMode
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + string(pvc.UID), Labels: map[string]string{"e2e.function-database/provisioned": "true"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			StorageClassName:              class,
			VolumeMode:                    &mode,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/e2e/" + string(pvc.UID)},
			},
		},
	}
	affinity := func(node string) *corev1.VolumeNodeAffinity {
		return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
			}}}},
		}}
	}
	if c.isRealNamespace(ctx, pvc.Namespace) {
		// A real folder on the node, owned by the uid the database pods
		// run as (hostPath volumes get no fsGroup).
		path := filepath.Join(c.volumesOf(node), pvc.Namespace+"-"+pvc.Name+"-"+string(pvc.UID))
		err := os.MkdirAll(path, 0o700)
		if err == nil {
			err = os.Chown(path, 999, 999)
		}
		if err != nil {
			return fmt.Errorf("volume folder %s: %w", path, err)
		}
		dirType := corev1.HostPathDirectory
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: path, Type: &dirType}
		pv.Spec.NodeAffinity = affinity(node)
	} else if node != realNodeName {
		pv.Spec.NodeAffinity = affinity(node)
	}
	if len(pv.Spec.AccessModes) == 0 {
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if _, err := c.kube.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("provision %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// volumesOf is the folder of a real node's volumes: the first node's
// (realVolumes), or a pool node's (nodes/<name>/volumes).
func (c *cluster) volumesOf(node string) string {
	if node == realNodeName {
		return c.realVolumes
	}
	return filepath.Join(c.dir, "nodes", node, "volumes")
}

// isRealNamespace tells whether a namespace's pods run on the real node.
func (c *cluster) isRealNamespace(ctx context.Context, ns string) bool {
	if v, ok := c.realNS.Load(ns); ok {
		return v.(bool)
	}
	n, err := c.kube.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return false
	}
	real := n.Labels[realNamespaceLabel] == "true"
	c.realNS.Store(ns, real)
	return real
}

// retry calls f until it succeeds or timeout; returns f's last error.
func retry(ctx context.Context, timeout time.Duration, f func() error) error {
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
