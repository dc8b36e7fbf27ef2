package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const (
	kwokNS = "kwok-ns" // a namespace whose pods kwok runs
	realNS = "real-ns" // a namespace of the real node's
)

// provisionCluster is a Cluster whose client is a fake clientset holding
// the two namespaces and objs, with nothing started.
func provisionCluster(t *testing.T, objs ...runtime.Object) (*Cluster, *fake.Clientset) {
	t.Helper()
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kwokNS}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: realNS, Labels: map[string]string{RealNamespaceLabel: "true"}}},
	)
	cs := fake.NewClientset(objs...)
	c := newCluster(Config{Dir: t.TempDir()})
	c.Client = cs
	return c, cs
}

// claim is a Pending claim of 1Gi in ns, of class (none when ""), with a
// UID of its name.
func claim(ns, name, class string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	if class != "" {
		pvc.Spec.StorageClassName = ptr.To(class)
	}
	return pvc
}

// classLister lists these StorageClasses.
func classLister(t *testing.T, classes ...*storagev1.StorageClass) storagelisters.StorageClassLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, sc := range classes {
		if err := idx.Add(sc); err != nil {
			t.Fatal(err)
		}
	}
	return storagelisters.NewStorageClassLister(idx)
}

func waitClass(name, provisioner string) *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       provisioner,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// pvOf is the volume provisioned for the claim, nil when there is none.
func pvOf(t *testing.T, cs *fake.Clientset, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	t.Helper()
	pv, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), "pv-"+string(pvc.UID), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return pv
}

// affinityNode is the one node a volume's affinity requires, "" when it
// has none.
func affinityNode(t *testing.T, pv *corev1.PersistentVolume) string {
	t.Helper()
	if pv.Spec.NodeAffinity == nil {
		return ""
	}
	terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 {
		t.Fatalf("affinity %+v, want one term of one expression", pv.Spec.NodeAffinity)
	}
	e := terms[0].MatchExpressions[0]
	if e.Key != corev1.LabelHostname || e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
		t.Fatalf("affinity expression %+v, want %s In [node]", e, corev1.LabelHostname)
	}
	return e.Values[0]
}

func TestProvisionClaimKwok(t *testing.T) {
	c, cs := provisionCluster(t)
	pvc := claim(kwokNS, "data-db-0", "")
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	if err := c.provisionClaim(context.Background(), pvc, classLister(t)); err != nil {
		t.Fatal(err)
	}
	pv := pvOf(t, cs, pvc)
	if pv == nil {
		t.Fatal("no volume")
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || ref.UID != pvc.UID {
		t.Errorf("claimRef %+v, want the claim's", ref)
	}
	if q := pv.Spec.Capacity[corev1.ResourceStorage]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("capacity %s, want the claim's 1Gi", q.String())
	}
	if len(pv.Spec.AccessModes) != 1 || pv.Spec.AccessModes[0] != corev1.ReadWriteOncePod {
		t.Errorf("access modes %v, want the claim's", pv.Spec.AccessModes)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("reclaim policy %s, want Retain", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if pv.Spec.VolumeMode == nil || *pv.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
		t.Errorf("volume mode %v, want Filesystem", pv.Spec.VolumeMode)
	}
	// Nothing is mounted for kwok: a path that does not exist, no affinity.
	if hp := pv.Spec.HostPath; hp == nil || hp.Path != "/nonexistent/e2e/"+string(pvc.UID) {
		t.Errorf("hostPath %+v, want /nonexistent/e2e/<uid>", hp)
	}
	if n := affinityNode(t, pv); n != "" {
		t.Errorf("affinity to %s, want none", n)
	}
	if pv.Labels["e2e.function-database/provisioned"] != "true" {
		t.Errorf("labels %v, want the provisioned label", pv.Labels)
	}

	// A second pass (a resync) changes nothing and is no error.
	if err := c.provisionClaim(context.Background(), pvc, classLister(t)); err != nil {
		t.Errorf("the volume exists already: %v", err)
	}
}

func TestProvisionClaimDefaultAccessMode(t *testing.T) {
	c, cs := provisionCluster(t)
	pvc := claim(kwokNS, "data", "")
	if err := c.provisionClaim(context.Background(), pvc, classLister(t)); err != nil {
		t.Fatal(err)
	}
	if pv := pvOf(t, cs, pvc); pv == nil || len(pv.Spec.AccessModes) != 1 || pv.Spec.AccessModes[0] != corev1.ReadWriteOnce {
		t.Fatalf("volume %+v, want ReadWriteOnce when the claim names no mode", pv)
	}
}

// TestProvisionClaimSkips: the claims the provisioner leaves alone.
func TestProvisionClaimSkips(t *testing.T) {
	bound := claim(kwokNS, "bound", "")
	bound.Status.Phase = corev1.ClaimBound
	named := claim(kwokNS, "named", "")
	named.Spec.VolumeName = "someone-elses"
	deleting := claim(kwokNS, "deleting", "")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	otherProvisioner := claim(kwokNS, "other", "local-path")
	unpicked := claim(kwokNS, "unpicked", "e2e-nodes")
	held := claim("held", "held", "")
	for _, pvc := range []*corev1.PersistentVolumeClaim{bound, named, deleting, otherProvisioner, unpicked, held} {
		c, cs := provisionCluster(t)
		c.HoldVolumes("held")
		classes := classLister(t, waitClass("local-path", "rancher.io/local-path"), waitClass("e2e-nodes", Provisioner))
		if err := c.provisionClaim(context.Background(), pvc, classes); err != nil {
			t.Errorf("%s: %v", pvc.Name, err)
		}
		if pv := pvOf(t, cs, pvc); pv != nil {
			t.Errorf("%s: provisioned %s", pvc.Name, pv.Name)
		}
	}
}

// TestProvisionClaimSelectedNode: a WaitForFirstConsumer claim of the
// suite's provisioner gets its volume on the node the scheduler picked.
func TestProvisionClaimSelectedNode(t *testing.T) {
	c, cs := provisionCluster(t)
	pvc := claim(kwokNS, "data", "e2e-nodes")
	pvc.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "kwok-node-1"}
	if err := c.provisionClaim(context.Background(), pvc, classLister(t, waitClass("e2e-nodes", Provisioner))); err != nil {
		t.Fatal(err)
	}
	pv := pvOf(t, cs, pvc)
	if pv == nil {
		t.Fatal("no volume")
	}
	if n := affinityNode(t, pv); n != "kwok-node-1" {
		t.Errorf("affinity to %q, want the selected node", n)
	}
	if pv.Spec.StorageClassName != "e2e-nodes" {
		t.Errorf("class %q, want the claim's", pv.Spec.StorageClassName)
	}
}

// TestProvisionClaimUnknownClass: a class the lister does not know (not
// created yet, or Immediate) binds at once, as a claim of no class.
func TestProvisionClaimUnknownClass(t *testing.T) {
	c, cs := provisionCluster(t)
	pvc := claim(kwokNS, "data", "standard")
	if err := c.provisionClaim(context.Background(), pvc, classLister(t)); err != nil {
		t.Fatal(err)
	}
	if pv := pvOf(t, cs, pvc); pv == nil || pv.Spec.StorageClassName != "standard" || affinityNode(t, pv) != "" {
		t.Fatalf("volume %+v, want one of class standard without affinity", pv)
	}
}

// TestProvisionClaimRealNamespace: a claim of a real namespace gets a real
// folder in its node's volumes, owned by the database pods' uid 999, and
// the node's affinity. Giving the folder away takes root: without it, the
// error says which folder.
func TestProvisionClaimRealNamespace(t *testing.T) {
	for _, node := range []string{RealNodeName, "pool-node-2"} {
		c, cs := provisionCluster(t)
		pvc := claim(realNS, "data-db-0", "")
		classes := classLister(t)
		if node != RealNodeName {
			pvc.Spec.StorageClassName = ptr.To("e2e-nodes")
			pvc.Annotations = map[string]string{"volume.kubernetes.io/selected-node": node}
			classes = classLister(t, waitClass("e2e-nodes", Provisioner))
		}
		path := filepath.Join(c.VolumesOf(node), realNS+"-data-db-0-"+string(pvc.UID))
		err := c.provisionClaim(context.Background(), pvc, classes)
		if os.Geteuid() != 0 {
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%s, not root: %v, want the error of giving %s to uid 999", node, err, path)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if st.Uid != 999 || st.Gid != 999 || st.Mode&0o777 != 0o700 {
			t.Errorf("%s: folder %d:%d %o, want 999:999 700", node, st.Uid, st.Gid, st.Mode&0o777)
		}
		pv := pvOf(t, cs, pvc)
		if pv == nil {
			t.Fatalf("%s: no volume", node)
		}
		if hp := pv.Spec.HostPath; hp == nil || hp.Path != path || hp.Type == nil || *hp.Type != corev1.HostPathDirectory {
			t.Errorf("%s: hostPath %+v, want the folder %s, a Directory", node, hp, path)
		}
		if n := affinityNode(t, pv); n != node {
			t.Errorf("affinity to %q, want %s", n, node)
		}
	}
}

// TestProvision runs the provisioner on a fake clientset: a Pending claim
// gets its volume; a held namespace's claim waits until released, when the
// informer's resync (2 s) brings it back.
func TestProvision(t *testing.T) {
	c, cs := provisionCluster(t)
	c.HoldVolumes("held")
	c.startProvisioner()
	defer c.Stop()
	ctx := context.Background()
	free, held := claim(kwokNS, "free", ""), claim("held", "held", "")
	for _, pvc := range []*corev1.PersistentVolumeClaim{free, held} {
		if _, err := cs.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPV := func(pvc *corev1.PersistentVolumeClaim, within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if pvOf(t, cs, pvc) != nil {
				return true
			}
		}
		return false
	}
	if !waitPV(free, 10*time.Second) {
		t.Fatal("no volume for a Pending claim")
	}
	// Past a resync: still held.
	if waitPV(held, 2500*time.Millisecond) {
		t.Fatal("a held namespace's claim was provisioned")
	}
	c.HoldVolumes("")
	if !waitPV(held, 10*time.Second) {
		t.Fatal("no volume for the claim once released")
	}
}
