//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/crossplane"
	"github.com/example/function-database/e2e/internal/kube"
)

// functionInPod moves the function from the suite's process into a pod on
// the real node, the way clusters run it: Crossplane core is restarted with
// its default Deployment runtime, creates the function's Deployment, Service
// and TLS Secrets from the installed FunctionRevision, and the node's
// containerd pulls the package's runtime image from the loopback registry.
// The local process is stopped afterwards, so from here on every
// RunFunction call reaches the pod.
//
// Core runs on the host, not in a pod: the revision's endpoint is the
// headless Service's DNS name (dns:///NAME.crossplane-system:9443), which
// only the cluster's DNS answers. Core is therefore started in a mount
// namespace of its own whose /etc/resolv.conf names the node's CoreDNS, with
// the search path a pod gets; the rest of the machine keeps its resolver.
func (s *suite) functionInPod(ctx context.Context) error {
	t0 := time.Now()
	n, x := s.node, s.xp
	if err := s.pullsPackages(n); err != nil {
		return err
	}
	// The function's pod goes to the real node (kwok would fake it).
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"scheduler.alpha.kubernetes.io/node-selector":"type=real","scheduler.alpha.kubernetes.io/defaultTolerations":%q}}}`,
		fmt.Sprintf(`[{"key":%q,"operator":"Exists","effect":"NoSchedule"}]`, cluster.RealNodeTaint))
	if _, err := s.k.CS.CoreV1().Namespaces().Patch(ctx, crossplane.Namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("namespace %s to the real node: %w", crossplane.Namespace, err)
	}

	resolv := n.Path("core-resolv.conf")
	if err := os.WriteFile(resolv, []byte(fmt.Sprintf("nameserver %s\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", cluster.BridgeIP, crossplane.Namespace)), 0o644); err != nil {
		return err
	}
	x.Core.Stop(15 * time.Second)
	args := []string{"--mount", "--propagation", "private", "--", "sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv, x.Core.Bin}
	for _, a := range x.Core.Args {
		if strings.HasPrefix(a, "--package-runtime=") {
			a = "--package-runtime=Deployment"
		}
		args = append(args, a)
	}
	x.Core.Bin, x.Core.Args = "unshare", args
	if err := x.Core.Start(); err != nil {
		return fmt.Errorf("crossplane core with the Deployment runtime: %w", err)
	}

	// Until the revision's endpoint is the Service, its runtime is healthy,
	// and the Deployment's pod is Ready on the real node.
	var last string
	deadline := time.Now().Add(4 * time.Minute)
	for ; time.Now().Before(deadline); time.Sleep(time.Second) {
		if ended, err := x.Core.Exited(); ended {
			return fmt.Errorf("crossplane core exited: %w\n%s", err, x.Core.Tail(30))
		}
		rev, err := x.Revision(ctx)
		if err != nil {
			last = err.Error()
			continue
		}
		ep, _, _ := unstructured.NestedString(rev.Object, "status", "endpoint")
		last = fmt.Sprintf("revision %s endpoint %q: %s", rev.GetName(), ep, kube.ConditionsString(rev))
		if !strings.HasPrefix(ep, "dns:///") || kube.GetCondition(rev, "RuntimeHealthy").Status != "True" {
			continue
		}
		pod, state := s.functionPod(ctx)
		last += "; " + state
		if pod != nil {
			logf("function %s in pod %s/%s on %s (%s), endpoint %s", x.FnName, pod.Namespace, pod.Name, pod.Spec.NodeName,
				pod.Spec.Containers[0].Image, ep)
			break
		}
	}
	if !time.Now().Before(deadline) {
		return fmt.Errorf("the function did not start in a pod within 4m: %s\n%s", last, x.Core.Tail(30))
	}
	// Nothing calls the local process any more; stopping it proves it.
	x.Fn.Stop(5 * time.Second)
	logf("function now runs only in its pod (%s)", time.Since(t0).Round(time.Millisecond))
	return nil
}

// pullsPackages makes node n's containerd pull the function's runtime image:
// the FunctionRevision's resolved source, which the ImageConfig has rewritten
// from pkgHost to the loopback registry. Both are configured, the second as a
// mirror, in case a revision keeps the name.
func (s *suite) pullsPackages(n *cluster.Node) error {
	if err := n.TrustRegistry(s.reg.Addr(), s.reg.CAFile()); err != nil {
		return err
	}
	return n.MirrorRegistry(strings.TrimSuffix(pkgHost, "/"), s.reg.Addr(), s.reg.CAFile())
}

// functionPod returns the function's Ready pod on the real node, or nil and
// what there is instead.
func (s *suite) functionPod(ctx context.Context) (*corev1.Pod, string) {
	ds, err := s.k.CS.AppsV1().Deployments(crossplane.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err.Error()
	}
	var d *appsv1.Deployment
	for i := range ds.Items {
		if strings.HasPrefix(ds.Items[i].Name, s.xp.FnName) {
			d = &ds.Items[i]
		}
	}
	if d == nil {
		return nil, "no Deployment " + s.xp.FnName + "* yet"
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err.Error()
	}
	pods, err := s.k.CS.CoreV1().Pods(crossplane.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err.Error()
	}
	var states []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == cluster.RealNodeName && podReady(p) {
			return p, ""
		}
		states = append(states, fmt.Sprintf("pod %s on %q: %s%s", p.Name, p.Spec.NodeName, p.Status.Phase, containerWaiting(p)))
	}
	return nil, fmt.Sprintf("Deployment %s: %d pods [%s]", d.Name, len(pods.Items), strings.Join(states, "; "))
}

func containerWaiting(p *corev1.Pod) string {
	var out string
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			out += fmt.Sprintf(" (%s: %s %s)", c.Name, w.Reason, w.Message)
		}
	}
	return out
}
