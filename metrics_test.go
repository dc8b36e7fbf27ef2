package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// monitoredXR is a Database with every alert: standbys, durability sync, a
// backup schedule, and (from the archive Composition's input) a WAL archive.
const monitoredXR = `
apiVersion: example.com/v1
kind: Database
metadata: {name: ledger, namespace: shop}
spec:
  version: "16"
  size: large
  durability: sync
  backup: {enabled: true, schedule: "0 2 * * 1-5"}
`

func monitoredResponse(t *testing.T, xr string) *fnv1.RunFunctionResponse {
	t.Helper()
	rsp := runTest(t, xrRequest(yamlStruct(t, xr), compositionInput(t, "example/archive/composition.yaml")))
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("Fatal result: %s", r.GetMessage())
		}
	}
	return rsp
}

func TestMetricsComposed(t *testing.T) {
	rsp := monitoredResponse(t, monitoredXR)
	res := rsp.GetDesired().GetResources()
	sts := typedAs[*appsv1.StatefulSet](t, res[string(rnStatefulSet)].GetResource())
	var names []string
	for _, c := range sts.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		if c.Name != containerMetrics {
			continue
		}
		if d := cmp.Diff([]string{"--web.listen-address=:9187", "--collector.stat_wal_receiver"}, c.Args); d != "" {
			t.Errorf("exporter args (-want +got):\n%s", d)
		}
		// Over the socket, as the monitoring role its own uid maps to: no
		// password anywhere in the exporter's environment, and not the
		// pod's uid, which maps to the superuser.
		if d := cmp.Diff("host=/var/run/postgresql port=5432 user=postgres-exporter dbname=postgres sslmode=disable application_name=metrics", c.Env[0].Value); d != "" {
			t.Errorf("DATA_SOURCE_NAME (-want +got):\n%s", d)
		}
		if u := c.SecurityContext.RunAsUser; u == nil || *u == postgresUID {
			t.Errorf("the exporter runs as uid %v, want a uid of its own (not %d: peer authentication maps it to the superuser)", u, postgresUID)
		}
		if c.ReadinessProbe != nil || c.LivenessProbe != nil {
			t.Errorf("the exporter has probes: a failing exporter would make PostgreSQL unready or restart nothing useful")
		}
	}
	// The scripts that admit (entrypoint.sh) and create (sync-passwords.sh)
	// the exporter's role are told its name and uid.
	for _, c := range sts.Spec.Template.Spec.Containers {
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		switch c.Name {
		case containerPostgres:
			if env[scripts.EnvMonitorUser] != monitorUser || env[scripts.EnvMonitorUID] != strconv.Itoa(monitorUID) {
				t.Errorf("postgres container: MONITOR_USER %q, MONITOR_UID %q, want %s and %d", env[scripts.EnvMonitorUser], env[scripts.EnvMonitorUID], monitorUser, monitorUID)
			}
		case containerPasswordSync:
			if env[scripts.EnvMonitorUser] != monitorUser {
				t.Errorf("password-sync container: MONITOR_USER %q, want %s", env[scripts.EnvMonitorUser], monitorUser)
			}
		}
	}
	if d := cmp.Diff([]string{containerPostgres, containerPasswordSync, containerMetrics}, names); d != "" {
		t.Errorf("containers (-want +got):\n%s", d)
	}
	pm := typedAs[*monitoringv1.PodMonitor](t, res[string(rnPodMonitor)].GetResource())
	if d := cmp.Diff(instanceLabels(&database{Name: "ledger"}), pm.Spec.Selector.MatchLabels); d != "" {
		t.Errorf("PodMonitor selector (-want +got):\n%s", d)
	}
	if got := pm.Labels["release"]; got != "prometheus" {
		t.Errorf("PodMonitor label release = %q, want the input's prometheus", got)
	}
	pr := typedAs[*monitoringv1.PrometheusRule](t, res[string(rnPrometheusRule)].GetResource())
	var alerts []string
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts = append(alerts, r.Alert)
	}
	want := []string{"DatabaseNotScraped", "DatabasePrimaryMissing", "DatabaseTwoPrimaries", "DatabaseInstanceDown", "DatabaseStandbyNotStreaming", "DatabaseSlotNearlyLost", "DatabaseWritesBlocked", "DatabaseConnectionsNearLimit", "DatabaseDiskFilling", "DatabaseArchiveFailing", "DatabaseBackupTooOld"}
	if d := cmp.Diff(want, alerts); d != "" {
		t.Errorf("alerts of a sync Database with standbys, an archive and backups (-want +got):\n%s", d)
	}

	// One instance, async, no backup: only what can happen to it.
	rsp = monitoredResponse(t, `
apiVersion: example.com/v1
kind: Database
metadata: {name: cache, namespace: shop}
spec: {version: "16", size: small}
`)
	pr = typedAs[*monitoringv1.PrometheusRule](t, rsp.GetDesired().GetResources()[string(rnPrometheusRule)].GetResource())
	alerts = nil
	for _, r := range pr.Spec.Groups[0].Rules {
		alerts = append(alerts, r.Alert)
	}
	want = []string{"DatabaseNotScraped", "DatabasePrimaryMissing", "DatabaseTwoPrimaries", "DatabaseInstanceDown", "DatabaseConnectionsNearLimit", "DatabaseDiskFilling", "DatabaseArchiveFailing"}
	if d := cmp.Diff(want, alerts); d != "" {
		t.Errorf("alerts of one instance without backups (-want +got):\n%s", d)
	}
}

func TestMetricsOff(t *testing.T) {
	// The default input: no exporter, no Prometheus Operator kinds (whose
	// CRDs a cluster may not have).
	rsp := runTest(t, xrRequest(yamlStruct(t, monitoredXR), compositionInput(t, "example/composition.yaml")))
	res := rsp.GetDesired().GetResources()
	for _, n := range []string{string(rnPodMonitor), string(rnPrometheusRule)} {
		if _, ok := res[n]; ok {
			t.Errorf("%s composed without metrics in the input", n)
		}
	}
	sts := typedAs[*appsv1.StatefulSet](t, res[string(rnStatefulSet)].GetResource())
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == containerMetrics {
			t.Errorf("exporter container composed without metrics in the input")
		}
	}
}

func TestInputBadMetrics(t *testing.T) {
	for _, tc := range []struct {
		name, metrics string
		paths         []string
	}{
		{"alerts without the exporter", `{alerts: true}`, []string{"input.metrics.enabled"}},
		{"an untagged image", `{enabled: true, image: registry.example.com/postgres-exporter}`, []string{"input.metrics.image"}},
		{"not an image", `{enabled: true, image: "Not An Image:"}`, []string{"input.metrics.image"}},
		{"a bad label", `{enabled: true, podMonitor: true, labels: {"bad key!": x}}`, []string{"input.metrics.labels[bad key!]"}},
		{"the function's label", `{enabled: true, podMonitor: true, labels: {app.kubernetes.io/instance: x}}`, []string{"input.metrics.labels[app.kubernetes.io/instance]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := yamlStruct(t, "apiVersion: database.fn.example.com/v1beta1\nkind: Input\nmetrics: "+tc.metrics)
			rsp := runTest(t, xrRequest(yamlStruct(t, monitoredXR), in))
			for _, p := range tc.paths {
				assertFatal(t, tc.name, rsp, p)
			}
		})
	}
}

func TestScheduleGap(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		want     time.Duration
	}{
		{"0 2 * * *", 24 * time.Hour},
		{"*/15 * * * *", 15 * time.Minute},
		{"0 2 * * 1-5", 72 * time.Hour}, // Friday to Monday
		{"@weekly", 7 * 24 * time.Hour},
		{"30 1,13 * * *", 12 * time.Hour},
		{"*/5 * * * 1-5", 48*time.Hour + 5*time.Minute}, // the weekend, seen past 400 runs
		{"@yearly", 366 * 24 * time.Hour},               // 2028 is a leap year
	} {
		got, ok := scheduleGap(tc.schedule)
		if !ok || got != tc.want {
			t.Errorf("scheduleGap(%q) = %v, %v; want %v", tc.schedule, got, ok, tc.want)
		}
	}
	if _, ok := scheduleGap("not a schedule"); ok {
		t.Errorf("scheduleGap accepted a bad schedule")
	}
}

// TestAlertRules runs the composed PrometheusRule through Prometheus's own
// rule engine (promtool test rules): each alert fires on the series of its
// fault, after its for:, and stays silent on a healthy Database
// (testdata/alerts/ledger.test.yaml).
func TestAlertRules(t *testing.T) {
	rsp := monitoredResponse(t, monitoredXR)
	pr := typedAs[*monitoringv1.PrometheusRule](t, rsp.GetDesired().GetResources()[string(rnPrometheusRule)].GetResource())
	rules, err := yaml.Marshal(struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}{pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FNDB_REQUIRE_TOOLS") != "" || os.Getenv("CI") != "" {
			t.Fatal("promtool not found (hack/install-postgres.sh installs Debian's prometheus)")
		}
		t.Skip("promtool not found (hack/install-postgres.sh installs Debian's prometheus)")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("testdata/alerts/ledger.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ledger.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, rules)
	}
	out, err := exec.Command(promtool, "test", "rules", filepath.Join(dir, "ledger.test.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	// Every composed alert has a case that fires it, and one case is a
	// healthy Database on which nothing fires.
	var cases ruleTests
	if err := yaml.Unmarshal(tests, &cases); err != nil {
		t.Fatal(err)
	}
	fired, healthy := map[string]bool{}, false
	for _, tc := range cases.Tests {
		silent := len(tc.AlertRuleTest) > 0
		for _, a := range tc.AlertRuleTest {
			fired[a.Alertname] = fired[a.Alertname] || len(a.ExpAlerts) > 0
			silent = silent && len(a.ExpAlerts) == 0
		}
		healthy = healthy || silent
	}
	for _, r := range pr.Spec.Groups[0].Rules {
		if !fired[r.Alert] {
			t.Errorf("alert %s has no case in testdata/alerts/ledger.test.yaml that fires it", r.Alert)
		}
	}
	if !healthy {
		t.Errorf("no healthy case: an alert that fires on a healthy Database would page for nothing")
	}
}

// ruleTests is what TestAlertRules reads of a promtool rule test file.
type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// typedAs decodes a desired composed resource into its typed kind.
func typedAs[T any](t *testing.T, s *structpb.Struct) T {
	t.Helper()
	obj, err := decodeTyped(s)
	if err != nil {
		t.Fatal(err)
	}
	out, ok := obj.(T)
	if !ok {
		t.Fatalf("decoded a %T", obj)
	}
	return out
}

// dashboard is what the tests read of example/monitoring/dashboard.json.
type dashboard struct {
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		GridPos struct {
			X, W int
		} `json:"gridPos"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboard checks the Grafana dashboard a platform imports: every
// panel's query is PromQL Prometheus's own parser takes (promtool check
// rules, each query a recording rule), with its variables set as Grafana
// sets them; panels fit the grid. TestOperate/Metrics runs the queries
// against a real Prometheus scraping real exporters.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("example/monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("example/monitoring/dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$namespace", "shop", "$database", "ledger")
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d taken", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos x %d w %d outside Grafana's 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, q := range p.Targets {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel%d:query%d", p.ID, i), Expr: vars.Replace(q.Expr)})
		}
	}
	if len(rules) == 0 {
		t.Fatal("no queries in the dashboard")
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FNDB_REQUIRE_TOOLS") != "" || os.Getenv("CI") != "" {
			t.Fatal("promtool not found (hack/install-postgres.sh installs Debian's prometheus)")
		}
		t.Skip("promtool not found (hack/install-postgres.sh installs Debian's prometheus)")
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query is not PromQL: %v\n%s", err, msg)
	}
}
