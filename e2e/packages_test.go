//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/example/function-database/e2e/internal/crossplane"
	"github.com/example/function-database/e2e/internal/kube"
)

const (
	// pkgVersion is the release README's install pushes; pkgBeyond is a tag of the
	// same function outside the Configuration's constraint (">=v0.1.0,
	// <v1.0.0"), which the package manager must not pick.
	pkgVersion = "v0.1.0"
	pkgBeyond  = "v1.0.0"
	// The packages' own names, as a platform's registry would hold them: the
	// Configuration is built to depend on fnPackage, and an ImageConfig
	// rewrites pkgHost to the loopback registry, as for a mirror.
	pkgHost    = "xpkg.example.test/"
	fnPackage  = pkgHost + "acme/function-database"
	cfgPackage = pkgHost + "acme/configuration-database"
)

// installedFunction is the name Crossplane v2.3.4's package manager gives
// the Function it creates for the Configuration's dependency on fnPackage:
// the repository path (acme/function-database) as a DNS label
// (resolver.NewPackage, xpkg.ToDNSLabel). The packaged Composition must call
// it by that name (hack/package.sh).
const installedFunction = "acme-function-database"

// What the test reads of the package objects, typed.
type (
	pkgObject struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Package string `json:"package"`
		} `json:"spec"`
		Status struct {
			ResolvedPackage string `json:"resolvedPackage"`
			CurrentRevision string `json:"currentRevision"`
		} `json:"status"`
	}
	lock struct {
		Packages []struct {
			Name         string           `json:"name"`
			Source       string           `json:"source"`
			Version      string           `json:"version"`
			Dependencies []lockDependency `json:"dependencies"`
		} `json:"packages"`
	}
	lockDependency struct {
		Package     string `json:"package"`
		Constraints string `json:"constraints"`
	}
	revisionStatus struct {
		Status struct {
			ResolvedImage         string   `json:"resolvedImage"`
			Capabilities          []string `json:"capabilities"`
			FoundDependencies     int64    `json:"foundDependencies"`
			InstalledDependencies int64    `json:"installedDependencies"`
			InvalidDependencies   int64    `json:"invalidDependencies"`
		} `json:"status"`
	}
	compositionPipeline struct {
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Pipeline []struct {
				Step        string `json:"step"`
				FunctionRef struct {
					Name string `json:"name"`
				} `json:"functionRef"`
			} `json:"pipeline"`
		} `json:"spec"`
	}
)

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, v any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, v); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// TestDatabasePackages checks what the suite's setup installed through
// Crossplane's package manager (README's Install, readmeInstall), which every
// other scenario composes with: the Configuration pulled from the loopback
// registry through the ImageConfig, its dependency resolved to the highest
// tag its constraint allows, the function's revision made from the pulled
// package, and the XRD and Composition owned by the Configuration's
// revision, the Composition calling the installed Function.
func TestDatabasePackages(t *testing.T) {
	s := env
	ctx := context.Background()
	get := func(apiVersion, name, kind string) *unstructured.Unstructured {
		t.Helper()
		u, err := s.k.Get(ctx, kube.GVK(apiVersion, kind), "", name)
		if err != nil {
			t.Fatalf("%s %s: %v", kind, name, err)
		}
		return u
	}

	cfgU := get("pkg.crossplane.io/v1", crossplane.ConfigurationName, "Configuration")
	var cfg pkgObject
	fromUnstructured(t, cfgU, &cfg)
	if want := s.reg.Mirror(pkgHost, cfgPackage) + ":" + pkgVersion; cfg.Status.ResolvedPackage != want {
		t.Errorf("Configuration %s resolved to %q, want %q (the ImageConfig's rewrite to the loopback registry)", crossplane.ConfigurationName, cfg.Status.ResolvedPackage, want)
	}
	for _, c := range []string{"Installed", "Healthy"} {
		if got := kube.GetCondition(cfgU, c); got.Status != "True" {
			t.Errorf("Configuration %s is not %s: %s", crossplane.ConfigurationName, c, kube.ConditionsString(cfgU))
		}
	}

	fnClient, err := s.k.Resource(crossplane.GVKFunction, "")
	if err != nil {
		t.Fatal(err)
	}
	fns, err := fnClient.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fns.Items) != 1 {
		t.Fatalf("%d Functions, want the one the Configuration's dependency installs", len(fns.Items))
	}
	var fn pkgObject
	fromUnstructured(t, &fns.Items[0], &fn)
	if fn.Name != installedFunction {
		t.Errorf("the dependency installed Function %q, want %q", fn.Name, installedFunction)
	}
	// v1.0.0 is pushed too, outside ">=v0.1.0, <v1.0.0".
	if want := fnPackage + ":" + pkgVersion; fn.Spec.Package != want {
		t.Errorf("Function %s installs %q, want %q: the highest tag the Configuration's constraint allows", fn.Name, fn.Spec.Package, want)
	}
	if want := s.reg.Mirror(pkgHost, fnPackage) + ":" + pkgVersion; fn.Status.ResolvedPackage != want {
		t.Errorf("Function %s resolved to %q, want %q", fn.Name, fn.Status.ResolvedPackage, want)
	}

	var l lock
	fromUnstructured(t, get("pkg.crossplane.io/v1beta1", "lock", "Lock"), &l)
	var dependsOnFn, fnLocked bool
	for _, p := range l.Packages {
		switch p.Source {
		case cfgPackage:
			dependsOnFn = slices.ContainsFunc(p.Dependencies, func(d lockDependency) bool {
				return d.Package == fnPackage && d.Constraints != ""
			})
		case fnPackage:
			fnLocked = p.Version == pkgVersion
		}
	}
	if !dependsOnFn || !fnLocked {
		t.Errorf("the package Lock: Configuration depends on %s %v, function at %s %v; want both: %+v", fnPackage, dependsOnFn, pkgVersion, fnLocked, l.Packages)
	}

	// The function's revision is the pulled package: the capabilities of
	// its package.yaml (Crossplane installs no objects from a function
	// package, not even its input CRD). The Configuration's revision found
	// and installed its one dependency.
	var fnRev revisionStatus
	fromUnstructured(t, get("pkg.crossplane.io/v1", fn.Status.CurrentRevision, "FunctionRevision"), &fnRev)
	if want := s.reg.Mirror(pkgHost, fnPackage) + ":" + pkgVersion; fnRev.Status.ResolvedImage != want || !slices.Equal(fnRev.Status.Capabilities, []string{"composition"}) {
		t.Errorf("FunctionRevision %s: image %q, capabilities %v; want %q, [composition]", fn.Status.CurrentRevision, fnRev.Status.ResolvedImage, fnRev.Status.Capabilities, want)
	}
	var cfgRev revisionStatus
	fromUnstructured(t, get("pkg.crossplane.io/v1", cfg.Status.CurrentRevision, "ConfigurationRevision"), &cfgRev)
	if st := cfgRev.Status; st.FoundDependencies != 1 || st.InstalledDependencies != 1 || st.InvalidDependencies != 0 {
		t.Errorf("ConfigurationRevision %s: dependencies found %d, installed %d, invalid %d; want 1, 1, 0", cfg.Status.CurrentRevision, st.FoundDependencies, st.InstalledDependencies, st.InvalidDependencies)
	}

	// The XRD and Composition came from the Configuration: each is
	// controlled by its active revision.
	xrd, err := kube.ReadObject(s.example("xrd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := kube.ReadObject(s.example("composition.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		u        *unstructured.Unstructured
		revision string
	}{
		{get("apiextensions.crossplane.io/v2", xrd.GetName(), "CompositeResourceDefinition"), cfg.Status.CurrentRevision},
		{get("apiextensions.crossplane.io/v1", comp.GetName(), "Composition"), cfg.Status.CurrentRevision},
	} {
		c := metav1.GetControllerOf(o.u)
		if c == nil || c.Name != o.revision || o.revision == "" {
			t.Errorf("%s %s is controlled by %+v, want the package revision %q", o.u.GetKind(), o.u.GetName(), c, o.revision)
		}
	}

	var cp compositionPipeline
	fromUnstructured(t, get("apiextensions.crossplane.io/v1", comp.GetName(), "Composition"), &cp)
	for _, step := range cp.Spec.Pipeline {
		if step.FunctionRef.Name != fn.Name {
			t.Errorf("the installed Composition's step %s calls %q, want the installed Function %q", step.Step, step.FunctionRef.Name, fn.Name)
		}
	}
}
