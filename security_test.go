package main

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// composedStack is one response's desired state, decoded into typed objects.
type composedStack struct {
	xr   *structpb.Struct
	rsp  *fnv1.RunFunctionResponse
	objs map[resource.Name]any
	// version and repo are what every image must be: repo:version.
	version, repo string
	// networkPolicy is whether the input leaves the NetworkPolicy on.
	networkPolicy bool
	// exporter is the metrics container's image when the input enables
	// metrics: pinned too, but its own, not PostgreSQL's.
	exporter string
}

// TestComposedStackSecurity checks the security of the composed stack of
// every example, new and running, with the example's Composition input and
// with none (the defaults).
func TestComposedStackSecurity(t *testing.T) {
	checks := map[string]struct {
		reason string
		check  func(t *testing.T, s composedStack)
	}{
		"PasswordsOnlyInSecrets": {
			reason: "A password may appear in the Secrets only: env vars take it by secretKeyRef, never as a literal value, and no other resource (nor the XR's status) contains it.",
			check:  checkPasswordsOnlyInSecrets,
		},
		"NoServiceAccountToken": {
			reason: "No pod talks to the Kubernetes API, so none gets a service account token.",
			check:  checkNoServiceAccountToken,
		},
		"NetworkPolicy": {
			reason: "By default a NetworkPolicy admits only PostgreSQL connections (and scrapes of the exporter, when metrics are on), only to the Database's pods, only from chosen peers.",
			check:  checkNetworkPolicy,
		},
		"PinnedImages": {
			reason: "Every image is <repo>:<spec.version>: never latest, never untagged, never floating.",
			check:  checkPinnedImages,
		},
		"ContainerSecurity": {
			reason: "Every container drops ALL capabilities, cannot escalate, is not privileged and runs as a non-root user; no pod shares host namespaces.",
			check: func(t *testing.T, s composedStack) {
				t.Helper()
				for name, obj := range s.objs {
					if spec := podSpecOf(obj); spec != nil {
						for _, p := range podSecurityProblems(spec) {
							t.Errorf("%s: %s", name, p)
						}
					}
				}
			},
		},
	}

	for _, ex := range allExamples(t) {
		for _, withInput := range []bool{true, false} {
			for _, running := range []bool{false, true} {
				name := ex.name + map[bool]string{true: "/running", false: "/new"}[running] + map[bool]string{true: "", false: "/no-input"}[withInput]
				t.Run(name, func(t *testing.T) {
					s := stackOf(t, ex, withInput, running)
					for cname, c := range checks {
						t.Run(cname, func(t *testing.T) {
							c.check(t, s)
							if t.Failed() {
								t.Log(c.reason)
							}
						})
					}
				})
			}
		}
	}
}

// stackOf composes an example, new or running, and decodes its desired
// composed resources strictly.
func stackOf(t *testing.T, ex example, withInput, running bool) composedStack {
	t.Helper()
	xr := readYAMLStruct(t, ex.xr)
	var in *structpb.Struct
	if withInput {
		in = compositionInput(t, ex.composition)
	}
	req := xrRequest(xr, in)
	rsp := runTest(t, req)
	if running {
		req.Observed.Resources = observedFrom(t, rsp, true)
		rsp = runTest(t, req)
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("example %s: Fatal result: %s", ex.xr, r.GetMessage())
		}
	}
	s := composedStack{
		xr: xr, rsp: rsp, objs: map[resource.Name]any{},
		version: stringAt(xr, "spec", "version"), repo: "postgres", networkPolicy: true,
	}
	if img := in.GetFields()["image"].GetStringValue(); img != "" {
		s.repo = img
	}
	if m := in.GetFields()["metrics"].GetStructValue().GetFields(); m["enabled"].GetBoolValue() {
		s.exporter = or(m["image"].GetStringValue(), defaultExporterImage)
	}
	if e := in.GetFields()["networkPolicy"].GetStructValue().GetFields()["enabled"]; e != nil {
		s.networkPolicy = e.GetBoolValue()
	}
	for name, r := range rsp.GetDesired().GetResources() {
		obj, err := decodeTyped(r.GetResource())
		if err != nil {
			t.Fatalf("desired composed resource %q: %v", name, err)
		}
		s.objs[resource.Name(name)] = obj
	}
	return s
}

func checkPasswordsOnlyInSecrets(t *testing.T, s composedStack) {
	t.Helper()
	// The passwords, by Secret and key.
	passwords := map[string]string{}
	secretNames := map[string]bool{}
	for _, obj := range s.objs {
		sec, ok := obj.(*corev1.Secret)
		if !ok {
			continue
		}
		secretNames[sec.Name] = true
		for k, v := range sec.Data {
			if strings.Contains(k, "password") {
				passwords[sec.Name+"/"+k] = string(v)
			}
		}
	}
	keys := make([]string, 0, len(passwords))
	for k, v := range passwords {
		keys = append(keys, k)
		if len(v) < 8 {
			t.Errorf("password %s is %q: too short to look for", k, v)
		}
	}
	sort.Strings(keys)
	n := s.objs[rnStatefulSet].(*appsv1.StatefulSet).Name //nolint:forcetypeassert // decoded by kind
	// app-password is the app password's copy, kept with the superuser's
	// (resolvePasswords); no superuser password is in the Secret apps mount.
	// The SCRAM verifiers count as passwords (one allows an offline guess
	// at its password): only the superuser Secret holds them.
	want := []string{
		n + "-credentials/password",
		n + "-superuser/app-password", n + "-superuser/app-password-verifier",
		n + "-superuser/password", n + "-superuser/password-verifier",
		n + "-superuser/replication-password", n + "-superuser/replication-password-verifier",
	}
	if d := cmp.Diff(want, keys); d != "" {
		t.Errorf("password keys of the Secrets (-want +got):\n%s", d)
	}

	contains := func(where, text string) {
		for k, pw := range passwords {
			if pw != "" && strings.Contains(text, pw) {
				t.Errorf("%s contains the password %s", where, k)
			}
		}
	}
	for name, r := range s.rsp.GetDesired().GetResources() {
		if _, ok := s.objs[resource.Name(name)].(*corev1.Secret); ok {
			continue
		}
		j, err := r.GetResource().MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		contains("desired composed resource "+name, string(j))
	}
	j, err := s.rsp.GetDesired().GetComposite().GetResource().MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	contains("the desired XR", string(j))
	for _, r := range s.rsp.GetResults() {
		contains("a result", r.GetMessage())
	}
	for _, c := range s.rsp.GetConditions() {
		contains("condition "+c.GetType(), c.GetMessage())
	}

	for name, obj := range s.objs {
		spec := podSpecOf(obj)
		if spec == nil {
			continue
		}
		for _, c := range allContainers(spec) {
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					t.Errorf("%s: container %s takes every key of Secret %s as env (envFrom): only secretKeyRef", name, c.Name, e.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				where := fmt.Sprintf("%s: container %s: env %s", name, c.Name, e.Name)
				contains(where, e.Value)
				if !strings.Contains(strings.ToUpper(e.Name), "PASSWORD") {
					continue
				}
				ref := e.ValueFrom
				if ref == nil || ref.SecretKeyRef == nil {
					t.Errorf("%s is not a secretKeyRef", where)
					continue
				}
				if !secretNames[ref.SecretKeyRef.Name] {
					t.Errorf("%s refers to Secret %q, not one of the Database's", where, ref.SecretKeyRef.Name)
				}
			}
		}
	}
}

func checkNoServiceAccountToken(t *testing.T, s composedStack) {
	t.Helper()
	for name, obj := range s.objs {
		if spec := podSpecOf(obj); spec != nil {
			if d := cmp.Diff(ptr.To(false), spec.AutomountServiceAccountToken); d != "" {
				t.Errorf("%s: automountServiceAccountToken (-want +got):\n%s", name, d)
			}
		}
	}
}

func checkNetworkPolicy(t *testing.T, s composedStack) {
	t.Helper()
	obj, ok := s.objs[rnNetworkPolicy]
	if !s.networkPolicy {
		if ok {
			t.Errorf("the input turns the NetworkPolicy off, yet one is composed")
		}
		return
	}
	if !ok {
		t.Fatalf("no NetworkPolicy composed (want one by default)")
	}
	np := obj.(*networkingv1.NetworkPolicy)            //nolint:forcetypeassert // decoded by kind
	sts := s.objs[rnStatefulSet].(*appsv1.StatefulSet) //nolint:forcetypeassert // decoded by kind
	if d := cmp.Diff([]string{sts.Name, sts.Namespace}, []string{np.Name, np.Namespace}); d != "" {
		t.Errorf("NetworkPolicy name and namespace (-want +got):\n%s", d)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Empty() || !sel.Matches(k8slabels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("the NetworkPolicy's pod selector %q does not select the Database's pods (labels %v) alone", sel, sts.Spec.Template.Labels)
	}
	if d := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes); d != "" {
		t.Errorf("policyTypes (-want +got):\n%s", d)
	}
	if len(np.Spec.Ingress) == 0 {
		t.Errorf("no ingress rule: the PostgreSQL pods would accept no connection at all")
	}
	// Port names resolve against the postgres container's ports.
	named := map[string]int32{}
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			named[p.Name] = p.ContainerPort
		}
	}
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Errorf("ingress[%d] admits every source", i)
		}
		for j, peer := range rule.From {
			if ns := peer.NamespaceSelector; ns != nil && len(ns.MatchLabels) == 0 && len(ns.MatchExpressions) == 0 {
				t.Errorf("ingress[%d].from[%d] admits every namespace", i, j)
			}
			if peer.IPBlock != nil {
				t.Errorf("ingress[%d].from[%d] admits an IP block %s", i, j, peer.IPBlock.CIDR)
			}
		}
		if len(rule.Ports) == 0 {
			t.Errorf("ingress[%d] admits every port", i)
		}
		for j, p := range rule.Ports {
			port := int32(-1)
			if p.Port != nil {
				port = p.Port.IntVal
				if p.Port.StrVal != "" {
					port = named[p.Port.StrVal]
				}
			}
			got := fmt.Sprintf("%s/%d", ptr.Deref(p.Protocol, corev1.ProtocolTCP), port)
			want := fmt.Sprintf("TCP/%d", postgresPort)
			if _, exporter := named[metricsPortName]; exporter && port == metricsPort {
				// The exporter's, scraped from the namespaces allowed.
				want = got
			}
			if d := cmp.Diff(want, got); d != "" || p.EndPort != nil {
				t.Errorf("ingress[%d].ports[%d] (-want +got):\n%s", i, j, d)
			}
		}
	}
}

func checkPinnedImages(t *testing.T, s composedStack) {
	t.Helper()
	if s.version == "" || s.version == "latest" {
		t.Fatalf("the example's spec.version is %q", s.version)
	}
	want, got := map[string]string{}, map[string]string{}
	for name, obj := range s.objs {
		if spec := podSpecOf(obj); spec != nil {
			for _, c := range allContainers(spec) {
				k := string(name) + "/" + c.Name
				want[k], got[k] = s.repo+":"+s.version, c.Image
				if c.Name == containerMetrics && s.exporter != "" {
					want[k] = s.exporter
				}
			}
		}
	}
	if len(got) == 0 {
		t.Fatal("no containers composed")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("images by resource/container (-want +got):\n%s", d)
	}
}

// objectMeta returns the metadata of a composed object: every typed kind
// embeds an ObjectMeta, which is its own accessor.
func objectMeta(obj any) *metav1.ObjectMeta {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return &metav1.ObjectMeta{}
}

// podTemplateOf returns the pod template of a composed object, or nil for a
// kind without pods. The Pod Security check (TestRestrictedPodSecurity), the
// container checks (TestComposedStackSecurity) and the fuzz invariants reach
// a kind's pods only through it: TestComposedKindChecklist fails for a
// composed kind that carries a pod template this does not know.
func podTemplateOf(obj any) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template
	case *batchv1.Job:
		return &o.Spec.Template
	}
	return nil
}

// podSpecOf returns the pod template's spec of a composed workload, or nil.
func podSpecOf(obj any) *corev1.PodSpec {
	if pt := podTemplateOf(obj); pt != nil {
		return &pt.Spec
	}
	return nil
}

func allContainers(spec *corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
}

// podSecurityProblems checks what every pod the function composes must be,
// whatever the request: no token, no host namespaces, and containers that
// drop every capability, cannot escalate and run as a non-root user.
func podSecurityProblems(spec *corev1.PodSpec) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if !equalPtr(spec.AutomountServiceAccountToken, false) {
		bad("automountServiceAccountToken is not false")
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		bad("shares a host namespace")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if len(spec.Containers) == 0 {
		bad("no containers")
	}
	for _, c := range allContainers(spec) {
		sc := c.SecurityContext
		if sc == nil {
			bad("container %s has no securityContext", c.Name)
			continue
		}
		if sc.Capabilities == nil || !containsCapability(sc.Capabilities.Drop, "ALL") {
			bad("container %s does not drop ALL capabilities", c.Name)
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			bad("container %s adds capabilities %v", c.Name, sc.Capabilities.Add)
		}
		if !equalPtr(sc.AllowPrivilegeEscalation, false) {
			bad("container %s may escalate privileges", c.Name)
		}
		if ptr.Deref(sc.Privileged, false) {
			bad("container %s is privileged", c.Name)
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = psc.RunAsNonRoot
		}
		if !equalPtr(nonRoot, true) {
			bad("container %s is not forced to run as non-root", c.Name)
		}
		uid := sc.RunAsUser
		if uid == nil {
			uid = psc.RunAsUser
		}
		if uid == nil || *uid == 0 {
			bad("container %s runs as uid %v, not an explicit non-root uid", c.Name, uid)
		}
	}
	return out
}

func equalPtr[T comparable](p *T, v T) bool { return p != nil && *p == v }

func containsCapability(cs []corev1.Capability, c corev1.Capability) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}
