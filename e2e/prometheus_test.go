//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/example/function-database/e2e/internal/proc"
)

// A real Prometheus server (Debian's prometheus, hack/cluster-tools.sh
// prometheus) on a free loopback port, for the scenarios that check what the
// metrics sidecar exports and when the Database's alert rules fire. It
// scrapes the pods from this machine over the bridge (the pod network is
// local, docs/real-node.md). Intervals are 5 s (scrapes) and 2 s (rules), not the PodMonitor's 15 s,
// so that an alert's `for` is what a test waits for, not the scrape.
//
// Discovery: Debian builds Prometheus without kubernetes_sd_configs (its
// NEWS: "Kubernetes support has been completely removed"), so the test
// process serves Prometheus's HTTP service discovery instead: the cluster's
// pods, read with the suite's admin client, one target per container port
// with the __meta_kubernetes_pod_* labels kubernetes_sd_configs' pod role
// gives. The relabelling is then the one a kubernetes_sd_configs job (and
// the Prometheus Operator's PodMonitor) would use, and swapping the
// discovery for `kubernetes_sd_configs: [{role: pod, kubeconfig_file:
// <s.cl.Kubeconfig>}]` is all a Prometheus built with it needs.

// prometheus is one running server.
type prometheus struct {
	proc   *proc.Proc
	dir    string // its config; its storage in dir/data
	base   string // http://127.0.0.1:PORT
	client *http.Client
	scrape bool // whether it scrapes the cluster's pods
	sd     *httptest.Server
}

// sample is one element of a query's result: an instant vector's series, or
// a scalar (no labels).
type sample struct {
	Labels map[string]string
	Value  float64
}

// alert is one alert the rules hold, pending (its expression true for less
// than its `for`) or firing.
type alert struct {
	Name   string // alertname
	Labels map[string]string
	State  string // "pending" or "firing"
	Value  string // the expression's value when last evaluated
}

// target is one scrape target as Prometheus last saw it.
type target struct {
	Labels    map[string]string
	ScrapeURL string
	Health    string // "up", "down" or "unknown"
	LastError string
}

// promJob is the scrape job's name: the job label of every scraped series.
const promJob = "database-metrics"

// startPrometheus starts a Prometheus server that scrapes every pod of the
// cluster with a container port named "metrics" (the exporter sidecar's) and
// the label app.kubernetes.io/instance (a Database's pods),
// evaluating ruleFiles (Prometheus rule files, not PrometheusRule objects),
// and waits until it is ready. It stops when the test ends.
func (s *suite) startPrometheus(t *testing.T, ruleFiles []string) *prometheus {
	t.Helper()
	return s.startPrometheusWith(t, true, ruleFiles)
}

// startPrometheusWith is startPrometheus; without pods it scrapes nothing
// and only evaluates the rules (no cluster needed).
func (s *suite) startPrometheusWith(t *testing.T, pods bool, ruleFiles []string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("no prometheus on PATH: install Debian prometheus (hack/cluster-tools.sh prometheus)")
	}
	n := s.promCount.Add(1)
	name := fmt.Sprintf("prometheus-%d", n)
	p := &prometheus{dir: filepath.Join(s.dir, "prometheus", strconv.Itoa(int(n))), client: &http.Client{Timeout: 5 * time.Second}, scrape: pods}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := make([]string, 0, len(ruleFiles))
	for _, f := range ruleFiles {
		// Relative paths in a config are the config's folder's, not ours.
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, abs)
	}
	cfg := map[string]any{
		// A scrape of the exporter takes more than a second on a busy
		// node: 2 s (the timeout would be the interval) left targets down.
		"global":     map[string]any{"scrape_interval": "5s", "scrape_timeout": "4s", "evaluation_interval": "2s"},
		"rule_files": rules,
	}
	if p.scrape {
		p.sd = httptest.NewServer(http.HandlerFunc(s.podTargets))
		// Registered first, so it runs last: after the server stops asking.
		t.Cleanup(p.sd.Close)
		cfg["scrape_configs"] = []any{podScrapeJob(p.sd.URL)}
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(p.dir, "prometheus.yml")
	if err := os.WriteFile(config, data, 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p.base = "http://" + addr
	p.proc = proc.New(s.dir, name, bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=info")
	if err := p.proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (%s), last lines:\n%s", name, p.proc.Log, p.proc.Tail(20))
		}
		p.proc.Stop(10 * time.Second)
		// The config stays with the logs; the samples are not worth keeping.
		_ = os.RemoveAll(filepath.Join(p.dir, "data"))
	})
	p.waitReady(t)
	return p
}

// podScrapeJob keeps the pods with a container port named "metrics" and the
// label app.kubernetes.io/instance, and labels their series as the PodMonitor the function composes does
// (namespace, pod, container, and database from the pod label
// app.kubernetes.io/instance), so the rules see the same labels here. sd is
// the discovery's URL (podTargets).
func podScrapeJob(sd string) map[string]any {
	return map[string]any{
		"job_name":        promJob,
		"http_sd_configs": []any{map[string]any{"url": sd, "refresh_interval": "2s"}},
		"relabel_configs": []any{
			map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_container_port_name"}, "regex": "metrics"},
			// A Database's pods, as a PodMonitor selects them by label: the
			// function's own pod has a port named metrics too.
			map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_pod_labelpresent_app_kubernetes_io_instance"}, "regex": "true"},
			// A finished pod's address may already be another pod's.
			map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "Succeeded|Failed"},
			map[string]any{
				"source_labels": []string{"__meta_kubernetes_pod_ip", "__meta_kubernetes_pod_container_port_number"},
				"regex":         "(.+);(.+)",
				"replacement":   "$1:$2",
				"target_label":  "__address__",
			},
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_label_app_kubernetes_io_instance"}, "target_label": "database"},
		},
	}
}

// podTargets answers Prometheus's HTTP service discovery: for every pod with
// an address, one target per container port, labelled as
// kubernetes_sd_configs' pod role labels it (the labels the relabelling and
// a PodMonitor use; pod labels sanitized to label names as it does).
func (s *suite) podTargets(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	pods, err := s.k.CS.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	groups := []group{}
	for _, pod := range pods.Items {
		if pod.Status.PodIP == "" {
			continue
		}
		ready := "false"
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = "true"
			}
		}
		base := map[string]string{
			"__meta_kubernetes_namespace":     pod.Namespace,
			"__meta_kubernetes_pod_name":      pod.Name,
			"__meta_kubernetes_pod_ip":        pod.Status.PodIP,
			"__meta_kubernetes_pod_uid":       string(pod.UID),
			"__meta_kubernetes_pod_node_name": pod.Spec.NodeName,
			"__meta_kubernetes_pod_phase":     string(pod.Status.Phase),
			"__meta_kubernetes_pod_ready":     ready,
			"__meta_kubernetes_pod_host_ip":   pod.Status.HostIP,
		}
		if ref := metav1.GetControllerOf(&pod); ref != nil {
			base["__meta_kubernetes_pod_controller_kind"] = ref.Kind
			base["__meta_kubernetes_pod_controller_name"] = ref.Name
		}
		for k, v := range pod.Labels {
			base["__meta_kubernetes_pod_label_"+labelName(k)] = v
			base["__meta_kubernetes_pod_labelpresent_"+labelName(k)] = "true"
		}
		for _, c := range pod.Spec.Containers {
			for _, port := range c.Ports {
				l := maps.Clone(base)
				l["__meta_kubernetes_pod_container_name"] = c.Name
				l["__meta_kubernetes_pod_container_image"] = c.Image
				l["__meta_kubernetes_pod_container_init"] = "false"
				l["__meta_kubernetes_pod_container_port_name"] = port.Name
				l["__meta_kubernetes_pod_container_port_number"] = strconv.Itoa(int(port.ContainerPort))
				l["__meta_kubernetes_pod_container_port_protocol"] = string(port.Protocol)
				addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))
				groups = append(groups, group{Targets: []string{addr}, Labels: l})
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(groups)
}

// labelName is a Kubernetes label key as a Prometheus label name: every
// character but [a-zA-Z0-9_] becomes "_" (Prometheus's SanitizeLabelName).
func labelName(k string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, k)
}

// waitReady waits until the server answers /-/ready (its storage open, its
// config and rules loaded); it fails at once if the server exits, which is
// what a config or rule file it rejects does.
func (p *prometheus) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, time.Minute, p.proc.Name+" ready", func() (bool, string) {
		if ended, err := p.proc.Exited(); ended {
			t.Fatalf("%s exited (%v):\n%s", p.proc.Name, err, p.proc.Tail(20))
		}
		resp, err := p.client.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	})
}

// get calls one of the HTTP API's endpoints and decodes its data.
func (p *prometheus) get(path string, query url.Values, data any) error {
	u := p.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	resp, err := p.client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s: %s", path, resp.Status, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// query evaluates promql now (/api/v1/query); the test fails if the query
// does. An empty result is no samples, not an error.
func (p *prometheus) query(t *testing.T, promql string) []sample {
	t.Helper()
	out, err := p.tryQuery(promql)
	if err != nil {
		t.Fatalf("query %s: %v", promql, err)
	}
	return out
}

func (p *prometheus) tryQuery(promql string) ([]sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {promql}}, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var series []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &series); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(series))
		for _, s := range series {
			v, err := sampleValue(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, sample{Labels: s.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var pair [2]any
		if err := json.Unmarshal(data.Result, &pair); err != nil {
			return nil, err
		}
		v, err := sampleValue(pair)
		if err != nil {
			return nil, err
		}
		return []sample{{Labels: map[string]string{}, Value: v}}, nil
	default:
		return nil, fmt.Errorf("result type %q: query an instant vector or a scalar", data.ResultType)
	}
}

// sampleValue reads the API's [unix time, "value"] pair; the value is a
// string so that NaN and ±Inf survive JSON.
func sampleValue(pair [2]any) (float64, error) {
	s, ok := pair[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", pair[1])
	}
	return strconv.ParseFloat(s, 64)
}

// alerts is every pending or firing alert (/api/v1/alerts).
func (p *prometheus) alerts(t *testing.T) []alert {
	t.Helper()
	out, err := p.tryAlerts()
	if err != nil {
		t.Fatalf("alerts: %v", err)
	}
	return out
}

func (p *prometheus) tryAlerts() ([]alert, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
			Value  string            `json:"value"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		return nil, err
	}
	out := make([]alert, 0, len(data.Alerts))
	for _, a := range data.Alerts {
		out = append(out, alert{Name: a.Labels["alertname"], Labels: a.Labels, State: a.State, Value: a.Value})
	}
	return out, nil
}

// targets is every scrape target and its health (/api/v1/targets): what a
// wait that fails shows, since a target down explains a missing series.
func (p *prometheus) targets() ([]target, error) {
	var data struct {
		Active []struct {
			Labels    map[string]string `json:"labels"`
			ScrapeURL string            `json:"scrapeUrl"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := p.get("/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		return nil, err
	}
	out := make([]target, 0, len(data.Active))
	for _, a := range data.Active {
		out = append(out, target{Labels: a.Labels, ScrapeURL: a.ScrapeURL, Health: a.Health, LastError: a.LastError})
	}
	return out, nil
}

// waitAlert waits until the alert name with (at least) labels is in state,
// "pending" or "firing", and returns it. An alert whose rule has no `for` is
// never pending. The API shows an evaluation's alerts a moment before its
// series (ALERTS, recording rules) can be queried: poll those too. On
// timeout it fails with the alerts and targets it last saw.
func (p *prometheus) waitAlert(t *testing.T, name string, labels map[string]string, state string, timeout time.Duration) alert {
	t.Helper()
	if state != "pending" && state != "firing" {
		t.Fatalf("waitAlert %s: state %q: want pending or firing", name, state)
	}
	var found alert
	eventually(t, timeout, fmt.Sprintf("alert %s%s %s", name, formatLabels(labels), state), func() (bool, string) {
		alerts, err := p.tryAlerts()
		if err != nil {
			return false, err.Error()
		}
		for _, a := range alerts {
			if a.Name == name && a.State == state && hasLabels(a.Labels, labels) {
				found = a
				return true, ""
			}
		}
		return false, p.describe(alerts)
	})
	return found
}

// describe says which alerts are active and, when it scrapes, how each
// target's last scrape went.
func (p *prometheus) describe(alerts []alert) string {
	var parts []string
	for _, a := range alerts {
		parts = append(parts, fmt.Sprintf("%s%s %s", a.Name, formatLabels(a.Labels), a.State))
	}
	if len(parts) == 0 {
		parts = append(parts, "no alerts")
	}
	if p.scrape {
		targets, err := p.targets()
		if err != nil {
			parts = append(parts, "targets: "+err.Error())
		} else if len(targets) == 0 {
			parts = append(parts, "no targets")
		}
		for _, tg := range targets {
			s := fmt.Sprintf("target %s %s", tg.ScrapeURL, tg.Health)
			if tg.LastError != "" {
				s += " (" + tg.LastError + ")"
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// formatLabels is labels as PromQL writes them, sorted: {a="1",b="2"}.
func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestPrometheusHarness checks the harness on its own, with no cluster: a
// rule with no `for` fires at its first evaluation, one with a long `for`
// stays pending, and queries answer vectors and scalars. About 3 s.
func TestPrometheusHarness(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte(`groups:
- name: harness
  rules:
  - alert: HarnessAlways
    expr: vector(1)
    labels: {severity: none}
  - alert: HarnessPending
    expr: vector(1)
    for: 1h
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := env.startPrometheusWith(t, false, []string{rules})
	p.waitAlert(t, "HarnessAlways", map[string]string{"severity": "none"}, "firing", 30*time.Second)
	p.waitAlert(t, "HarnessPending", nil, "pending", 30*time.Second)
	if got := p.query(t, `vector(2)`); len(got) != 1 || got[0].Value != 2 || len(got[0].Labels) != 0 {
		t.Errorf("vector(2) = %+v, want one sample 2 without labels", got)
	}
	if got := p.query(t, `3`); len(got) != 1 || got[0].Value != 3 {
		t.Errorf("3 = %+v, want the scalar 3", got)
	}
	// The alert's ALERTS series lands after the API shows it firing.
	eventually(t, 10*time.Second, "the ALERTS series of HarnessAlways", func() (bool, string) {
		got, err := p.tryQuery(`ALERTS{alertname="HarnessAlways",alertstate="firing"}`)
		return err == nil && len(got) == 1, fmt.Sprintf("%+v %v", got, err)
	})
}
