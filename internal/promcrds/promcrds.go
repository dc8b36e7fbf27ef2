// Package promcrds finds the Prometheus Operator's own CRDs of the kinds
// the function composes (PodMonitor, PrometheusRule), for the render test to
// validate against and the e2e suite to install.
package promcrds

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// monitoringAPIs is the Go module of the Prometheus Operator's API types the
// function composes with; the operator's own module, at the same version,
// holds their CRDs.
const (
	monitoringAPIs   = "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"
	monitoringModule = "github.com/prometheus-operator/prometheus-operator"
)

// Files returns the Prometheus Operator's CRDs of PodMonitor and
// PrometheusRule at the version go.mod pins for their Go types, downloaded
// from the Go module proxy: a render validates against the schemas the
// operator's API server would apply.
func Files(root string) ([]string, error) {
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", monitoringAPIs)
	list.Dir = root
	v, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m %s: %w", monitoringAPIs, err)
	}
	// Outside the module: downloading must not touch go.mod or go.sum.
	download := exec.Command("go", "mod", "download", "-json", monitoringModule+"@"+strings.TrimSpace(string(v)))
	download.Dir = os.TempDir()
	download.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=-mod=mod")
	out, err := download.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", monitoringModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, err
	}
	var crds []string
	for _, kind := range []string{"podmonitors", "prometheusrules"} {
		f := filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml")
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
		crds = append(crds, f)
	}
	return crds, nil
}
