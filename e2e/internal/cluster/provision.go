package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Provisioner is the suite's volume provisioner, for StorageClasses whose
// claims wait for the scheduler (WaitForFirstConsumer).
const Provisioner = "e2e.function-database/hostpath"

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
func (c *Cluster) provision(ctx context.Context) {
	defer close(c.provDone)
	cs := c.Client
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
func (c *Cluster) provisionClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, classes storagelisters.StorageClassLister) error {
	hold, _ := c.holdPVs.Load().(string)
	if pvc.Status.Phase != corev1.ClaimPending || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Namespace == hold {
		return nil
	}
	class := ""
	if pvc.Spec.StorageClassName != nil {
		class = *pvc.Spec.StorageClassName
	}
	// The first real node unless the scheduler picks (WaitForFirstConsumer).
	node := RealNodeName
	if class != "" {
		sc, err := classes.Get(class)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if sc != nil && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
			if sc.Provisioner != Provisioner {
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
		path := filepath.Join(c.VolumesOf(node), pvc.Namespace+"-"+pvc.Name+"-"+string(pvc.UID))
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
	} else if node != RealNodeName {
		pv.Spec.NodeAffinity = affinity(node)
	}
	if len(pv.Spec.AccessModes) == 0 {
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("provision %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// VolumesOf is the folder of a real node's volumes, where the provisioner
// makes the folders of its claims in real namespaces: the first node's
// (Dir/node/volumes), or another node's (Dir/nodes/<name>/volumes).
func (c *Cluster) VolumesOf(node string) string {
	if node == RealNodeName {
		return c.realVolumes
	}
	return filepath.Join(c.Dir, "nodes", node, "volumes")
}

// isRealNamespace tells whether a namespace's pods run on the real node.
func (c *Cluster) isRealNamespace(ctx context.Context, ns string) bool {
	if v, ok := c.realNS.Load(ns); ok {
		return v.(bool)
	}
	n, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return false
	}
	real := n.Labels[RealNamespaceLabel] == "true"
	c.realNS.Store(ns, real)
	return real
}
