// Package crossplane runs Crossplane for the e2e suite as a platform team's
// cluster would have it, without pods: core (out of cluster, External package
// runtime) and its RBAC manager as child processes under the ServiceAccounts
// and ClusterRoles of Crossplane's own Helm chart (rendered from the module of
// the core binary's version), and the function under test as a local process
// serving mTLS with a certificate from Crossplane's CA. PreparePackages and
// ServePackages let core install the Configuration and its Function from the
// suite's registry as README's Install section does, standing in for the
// function's runtime.
package crossplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
	"github.com/example/function-database/e2e/internal/registry"
)

const (
	Namespace         = "crossplane-system"
	xpCASecret        = "crossplane-root-ca"
	xpClientSecret    = "crossplane-tls-client"
	fnName            = "function-database" // the local process and its certificate
	fnTLSSecret       = "function-database-tls-server"
	ConfigurationName = "configuration-database"
)

var (
	GVKFunction         = kube.GVK("pkg.crossplane.io/v1", "Function")
	gvkFunctionRevision = kube.GVK("pkg.crossplane.io/v1", "FunctionRevision")
	GVKConfiguration    = kube.GVK("pkg.crossplane.io/v1", "Configuration")
	gvkImageConfig      = kube.GVK("pkg.crossplane.io/v1beta1", "ImageConfig")
	GVKXRD              = kube.GVK("apiextensions.crossplane.io/v2", "CompositeResourceDefinition")
)

// Stack is Crossplane core (out of cluster, External package runtime)
// and the function under test, both child processes.
type Stack struct {
	dir   string
	cl    *cluster.Cluster
	k     *kube.Client // the suite's clients of cl
	Core  *proc.Proc
	RBAC  *proc.Proc // the RBAC manager
	Fn    *proc.Proc
	fnBin string

	FnAddr   string
	fnTLS    map[string][]byte // the function's server certificate, key and CA
	FnName   string            // the Function the Configuration's dependency became
	clientCA *pki.CA           // Crossplane's CA, made by `core init`
}

func (x *Stack) Procs() []*proc.Proc {
	var out []*proc.Proc
	for _, p := range []*proc.Proc{x.Core, x.RBAC, x.Fn} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

func (x *Stack) Stop() {
	// Core first: it must not see the function vanish mid-reconcile and
	// record errors that a later step would trip over.
	if x.Core != nil {
		x.Core.Stop(15 * time.Second)
	}
	if x.RBAC != nil {
		x.RBAC.Stop(5 * time.Second)
	}
	if x.Fn != nil {
		x.Fn.Stop(5 * time.Second)
	}
}

// coreModule finds the crossplane module of the built core binary's version:
// its CRDs and Helm chart.
func coreModule(ctx context.Context, logDir, coreBin string) (string, error) {
	target, err := os.Readlink(coreBin)
	if err != nil {
		target = coreBin
	}
	version := strings.TrimPrefix(filepath.Base(target), "crossplane-core-")
	if !strings.HasPrefix(version, "v") {
		return "", fmt.Errorf("cannot tell the version of %s (%s)", coreBin, target)
	}
	out, err := proc.Output(ctx, filepath.Join(logDir, "go.log"), os.TempDir(), "go", "mod", "download", "-json", "github.com/crossplane/crossplane/v2@"+version)
	if err != nil {
		return "", fmt.Errorf("go mod download crossplane %s: %w", version, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return "", err
	}
	for _, d := range []string{"crds", "charts/crossplane/templates"} {
		if dir := filepath.Join(m.Dir, "cluster", d); !isDir(dir) {
			return "", fmt.Errorf("no %s", dir)
		}
	}
	return m.Dir, nil
}

// Start starts core, trusting the CA in caBundle for package
// registries, and the function as a local process; k is the suite's clients
// of cl.
func Start(ctx context.Context, dir string, cl *cluster.Cluster, k *kube.Client, coreBin, fnBin, caBundle string, logf func(string, ...any)) (*Stack, error) {
	x := &Stack{dir: filepath.Join(dir, "crossplane"), cl: cl, k: k, fnBin: fnBin}
	t0 := time.Now()
	if err := os.MkdirAll(x.dir, 0o755); err != nil {
		return x, err
	}
	module, err := coreModule(ctx, filepath.Join(dir, "logs"), coreBin)
	if err != nil {
		return x, err
	}
	crds := filepath.Join(module, "cluster", "crds")
	cs := k.CS
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return x, err
	}

	// Core's identity: the chart's ServiceAccount and roles. Its own rules
	// reach it only through the aggregated `crossplane` ClusterRole, once
	// kube-controller-manager has aggregated them: wait for that.
	rbacObjs, err := renderChartRBAC(module, Namespace)
	if err != nil {
		return x, err
	}
	for _, o := range rbacObjs {
		if _, err := k.Apply(ctx, o); err != nil {
			return x, fmt.Errorf("apply chart %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if err := k.WaitAllowed(ctx, 60*time.Second, Namespace, CoreSA, true,
		kube.Access{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}); err != nil {
		return x, fmt.Errorf("the chart's ClusterRoles never reached core: %w", err)
	}
	kcfg, err := x.serviceAccountKubeconfig(ctx, CoreSA)
	if err != nil {
		return x, err
	}
	logf("Crossplane chart RBAC applied (%d objects); core runs as ServiceAccount %s/%s (%s)", len(rbacObjs), Namespace, CoreSA, time.Since(t0).Round(time.Millisecond))
	env := []string{
		"KUBECONFIG=" + kcfg,
		"POD_NAMESPACE=" + Namespace,
		"POD_SERVICE_ACCOUNT=" + CoreSA,
	}

	// core init: CRDs and the TLS secrets. Its first try on a fresh API
	// server can fail on discovery lag of the CRDs it has just made: retry.
	initEnv := slices.Concat(env, []string{
		"CRDS_PATH=" + crds,
		"TLS_CA_SECRET_NAME=" + xpCASecret,
		"TLS_CLIENT_SECRET_NAME=" + xpClientSecret,
	})
	initLog := filepath.Join(dir, "logs", "crossplane-init.log")
	var initErr error
	for attempt := 1; attempt <= 8; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 90*time.Second)
		initErr = proc.Run(actx, initLog, x.dir, initEnv, coreBin, "core", "init", "--enable-webhooks=false")
		cancel()
		if initErr == nil {
			break
		}
		logf("crossplane core init attempt %d failed (%v); retrying", attempt, initErr)
		time.Sleep(2 * time.Second)
	}
	if initErr != nil {
		return x, fmt.Errorf("crossplane core init: %w\n%s", initErr, proc.TailFile(initLog, 20))
	}
	logf("crossplane core init done (%s)", time.Since(t0).Round(time.Millisecond))
	if err := x.startRBACManager(ctx, dir, coreBin); err != nil {
		return x, err
	}
	logf("crossplane RBAC manager started as ServiceAccount %s/%s (%s)", Namespace, rbacSA, time.Since(t0).Round(time.Millisecond))

	// Crossplane's client certificate, for core start, and its CA, which
	// signs the function's server certificate.
	client, err := cs.CoreV1().Secrets(Namespace).Get(ctx, xpClientSecret, metav1.GetOptions{})
	if err != nil {
		return x, err
	}
	clientDir := filepath.Join(x.dir, "tls-client")
	if err := writeFiles(clientDir, client.Data, "tls.crt", "tls.key", "ca.crt"); err != nil {
		return x, fmt.Errorf("secret %s: %w", xpClientSecret, err)
	}
	caSecret, err := cs.CoreV1().Secrets(Namespace).Get(ctx, xpCASecret, metav1.GetOptions{})
	if err != nil {
		return x, err
	}
	if x.clientCA, err = pki.ParseCA(caSecret.Data["tls.crt"], caSecret.Data["tls.key"]); err != nil {
		return x, fmt.Errorf("secret %s: %w", xpCASecret, err)
	}

	// The function, serving mTLS on a free loopback port: a server cert for
	// 127.0.0.1 from Crossplane's CA, and that CA to check Crossplane's
	// client certificate.
	crt, key, err := x.clientCA.Issue(pki.CertSpec{CommonName: fnName, DNSNames: []string{"localhost", fnName}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		return x, err
	}
	x.fnTLS = map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": x.clientCA.CertPEM}
	fnDir := filepath.Join(x.dir, "function-tls")
	if err := writeFiles(fnDir, x.fnTLS, "tls.crt", "tls.key", "ca.crt"); err != nil {
		return x, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return x, err
	}
	x.FnAddr = "127.0.0.1:" + strconv.Itoa(port)
	x.Fn = proc.New(dir, "function", fnBin, "--address="+x.FnAddr, "--tls-server-certs-dir="+fnDir, "--metrics-address=", "--debug")
	if err := x.Fn.Start(); err != nil {
		return x, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = proc.WaitTCP(wctx, x.FnAddr, x.Fn)
	cancel()
	if err != nil {
		return x, fmt.Errorf("function: %w", err)
	}
	logf("function serving mTLS on %s", x.FnAddr)

	// core start. Metrics and health probe ports: core formats them as
	// ":PORT", so 0 is the closest to off it allows (an ephemeral port).
	// A short poll interval makes steady-state churn visible within a minute.
	cacheDir := filepath.Join(x.dir, "xpkg-cache")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return x, err
	}
	x.Core = proc.New(dir, "crossplane", coreBin, "core", "start",
		"--package-runtime=External",
		// The loopback registry's CA, for pulling packages (added to the
		// system's roots).
		"--ca-bundle-path="+caBundle,
		"--enable-webhooks=false",
		"--tls-client-certs-dir="+clientDir,
		"--cache-dir="+cacheDir,
		"--metrics-port=0",
		"--health-probe-port=0",
		"--poll-interval=15s",
		// kwok compresses a rollout into a second: every pod turns Ready at
		// once, and the StatefulSet, PDB and XR status events of a resize
		// exceed the default XR circuit breaker (100 events, 1/s refill),
		// which then drops even the XR's own spec changes for minutes. A
		// larger bucket keeps the breaker for real hot loops (see
		// checkResponsive); NoChurn covers loops in steady state.
		"--circuit-breaker-burst=1000",
		"--circuit-breaker-refill-rate=10",
		"--debug",
	)
	// grpc's own log of core's client connections (the resolver's
	// addresses, each subchannel's state, each transport closed): twice in
	// full runs every call to the function hung after its Deployment moved,
	// and core's log alone did not say on which connection.
	x.Core.Env = slices.Concat(env, []string{"GRPC_GO_LOG_SEVERITY_LEVEL=info"})
	if err := x.Core.Start(); err != nil {
		return x, err
	}

	logf("crossplane core started (%s)", time.Since(t0).Round(time.Millisecond))
	return x, nil
}

// RestartCore stops Crossplane core by its PID and starts it again.
func (x *Stack) RestartCore() error {
	x.Core.Stop(15 * time.Second)
	return x.Core.Start()
}

// The package object the suite applies, typed: pkg.crossplane.io/v1beta1
// ImageConfig (only the fields used; README's commands apply the
// Configuration).
type (
	imageConfig struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              imageConfigSpec `json:"spec"`
	}
	imageConfigSpec struct {
		MatchImages  []imageMatch  `json:"matchImages"`
		RewriteImage *imageRewrite `json:"rewriteImage,omitempty"`
	}
	imageMatch struct {
		Type   string `json:"type,omitempty"`
		Prefix string `json:"prefix"`
	}
	imageRewrite struct {
		Prefix string `json:"prefix"`
	}
)

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// PreparePackages readies the cluster for installing the packages as a
// platform team does (README's Install section, readmeInstall), through
// Crossplane's package manager: an ImageConfig points pkgHost at the
// loopback registry (a mirror: core's pulls need no name resolution), and
// the TLS Secret the function serves with. Core then pulls the
// Configuration, resolves its dependency (creating the Function, named
// after the dependency's repository, at the highest tag the constraint
// allows) and installs both revisions, the XRD and Composition among the
// Configuration's objects.
func (x *Stack) PreparePackages(ctx context.Context, reg *registry.Registry, pkgHost string) error {
	k := x.k
	cs := k.CS
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: fnTLSSecret, Namespace: Namespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       x.fnTLS,
	}
	if _, err := cs.CoreV1().Secrets(Namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, g := range []schema.GroupVersionKind{gvkImageConfig, GVKConfiguration, GVKFunction} {
		if err := k.WaitKind(wctx, g); err != nil {
			return err
		}
	}
	ic, err := toUnstructured(&imageConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvkImageConfig.GroupVersion().String(), Kind: gvkImageConfig.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-mirror"},
		Spec: imageConfigSpec{
			MatchImages:  []imageMatch{{Type: "Prefix", Prefix: pkgHost}},
			RewriteImage: &imageRewrite{Prefix: reg.Addr() + "/"},
		},
	})
	if err != nil {
		return err
	}
	if _, err := k.Apply(ctx, ic); err != nil {
		return fmt.Errorf("apply ImageConfig: %w", err)
	}
	return nil
}

// ServePackages does what a function's runtime would, until the
// Configuration and its Function are both Installed and Healthy (or ctx
// ends): with the External runtime nothing runs the function or sets its
// revision's endpoint, so the function runs here as a process, and we give
// the revision its address and TLS Secret.
func (x *Stack) ServePackages(ctx context.Context) error {
	k := x.k
	endpoint := x.FnAddr
	var last string
	// Give the Function's active revision the function's endpoint and mark
	// its runtime healthy, again whenever core overwrites a status it read
	// before our update.
	for ctx.Err() == nil {
		if ended, err := x.Core.Exited(); ended {
			return fmt.Errorf("crossplane core exited: %w\n%s", err, x.Core.Tail(30))
		}
		last = ""
		cfgReady := false
		if c, err := k.Get(ctx, GVKConfiguration, "", ConfigurationName); err == nil {
			last = "Configuration: " + kube.ConditionsString(c)
			cfgReady = kube.GetCondition(c, "Installed").Status == "True" && kube.GetCondition(c, "Healthy").Status == "True"
		}
		fnReady := false
		fnClient, err := k.Resource(GVKFunction, "")
		if err != nil {
			return err
		}
		fns, err := fnClient.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(fns.Items) > 1 {
			return fmt.Errorf("%d Functions installed, want the one the Configuration depends on", len(fns.Items))
		}
		for i := range fns.Items {
			f := &fns.Items[i]
			x.FnName = f.GetName()
			last += fmt.Sprintf("; Function %s: %s", f.GetName(), kube.ConditionsString(f))
			rev, err := x.Revision(ctx)
			if err != nil {
				last += "; " + err.Error()
				break
			}
			last += "; FunctionRevision: " + kube.ConditionsString(rev)
			ep, _, _ := unstructured.NestedString(rev.Object, "status", "endpoint")
			if ep != endpoint || kube.GetCondition(rev, "RuntimeHealthy").Status != "True" {
				if err := x.patchRevision(ctx, rev, endpoint); err != nil {
					last += "; patch: " + err.Error()
				}
				break
			}
			fnReady = kube.GetCondition(f, "Installed").Status == "True" && kube.GetCondition(f, "Healthy").Status == "True"
		}
		if cfgReady && fnReady {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("the Configuration %s and its Function not Installed and Healthy: %s", ConfigurationName, last)
}

func (x *Stack) Revision(ctx context.Context) (*unstructured.Unstructured, error) {
	c, err := x.k.Resource(gvkFunctionRevision, "")
	if err != nil {
		return nil, err
	}
	l, err := c.List(ctx, metav1.ListOptions{LabelSelector: "pkg.crossplane.io/package=" + x.FnName})
	if err != nil {
		return nil, err
	}
	for i := range l.Items {
		if s, _, _ := unstructured.NestedString(l.Items[i].Object, "spec", "desiredState"); s == "Active" {
			return &l.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no active FunctionRevision for %s yet (%d revisions)", x.FnName, len(l.Items))
}

func (x *Stack) patchRevision(ctx context.Context, rev *unstructured.Unstructured, endpoint string) error {
	rev = rev.DeepCopy()
	if err := unstructured.SetNestedField(rev.Object, endpoint, "status", "endpoint"); err != nil {
		return err
	}
	if err := unstructured.SetNestedField(rev.Object, fnTLSSecret, "status", "tlsServerSecretName"); err != nil {
		return err
	}
	list, _, _ := unstructured.NestedSlice(rev.Object, "status", "conditions")
	var out []any
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == "RuntimeHealthy" {
			continue
		}
		out = append(out, c)
	}
	out = append(out, map[string]any{
		"type":               "RuntimeHealthy",
		"status":             "True",
		"reason":             "HealthyPackageRevision",
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	})
	if err := unstructured.SetNestedSlice(rev.Object, out, "status", "conditions"); err != nil {
		return err
	}
	c, err := x.k.Resource(gvkFunctionRevision, "")
	if err != nil {
		return err
	}
	_, err = c.UpdateStatus(ctx, rev, metav1.UpdateOptions{FieldManager: kube.FieldManager})
	return err
}

func writeFiles(dir string, data map[string][]byte, keys ...string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, k := range keys {
		v, ok := data[k]
		if !ok || len(v) == 0 {
			return fmt.Errorf("no %s", k)
		}
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
