//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/internal/promcrds"
)

var (
	gvkPodMonitor     = kube.GVK("monitoring.coreos.com/v1", "PodMonitor")
	gvkPrometheusRule = kube.GVK("monitoring.coreos.com/v1", "PrometheusRule")
)

// observe is TestOperate's metrics and alerts (docs/metrics.md), on real
// pods: a Database of a Composition whose input turns metrics on, with the
// Prometheus Operator's own CRDs installed so that Crossplane, on its real
// permissions, applies the PodMonitor and the PrometheusRule and the API
// server validates them. A real Prometheus scrapes the exporters and
// evaluates the PrometheusRule read back from the cluster.
//
//   - Metrics: every instance is scraped, with the labels the alerts
//     select by; the primary and the standby say what they are, the
//     standby streams, and no alert of the Database is pending or firing.
//   - AlertFires: the standby's replication connection to the primary is
//     cut (durability sync, so every commit waits): DatabaseWritesBlocked
//     fires after its for:, StandbyNotStreaming is pending; healed, both
//     resolve.
//   - Promotion: a switchover; the timeline the standbys stream (the
//     dashboard's count of promotions) goes up by one.
func (s *suite) observe(t *testing.T, ns string) {
	ctx := context.Background()
	const comp, name = "database-real-metrics", "watched"
	s.installMonitoringCRDs(t)
	metrics := func(in map[string]any) {
		in["metrics"] = map[string]any{"enabled": true, "image": cluster.ExporterImage, "podMonitor": true, "alerts": true, "labels": map[string]any{"release": "e2e"}}
	}
	if err := s.applyComposition(ctx, comp, metrics); err != nil {
		t.Fatal(err)
	}
	u := realDatabase(t, ns, name, "medium", map[string]any{"durability": "sync"})
	if err := unstructured.SetNestedField(u.Object, comp, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	d := s.create(t, u)
	defer s.removeDatabases(t, d)
	xr := s.waitRealReady(t, d)
	primary := str(xr, "status", "primary")
	standby := name + "-1"
	if primary == standby {
		standby = name + "-0"
	}

	// What Crossplane applied, as the Prometheus Operator would read it.
	pm, err := s.k.Get(ctx, gvkPodMonitor, ns, name)
	if err != nil {
		t.Fatalf("PodMonitor %s/%s: %v", ns, name, err)
	}
	if got := pm.GetLabels()["release"]; got != "e2e" {
		t.Errorf("PodMonitor label release = %q, want the input's e2e", got)
	}
	rules := s.ruleFile(t, ns, name)
	p := s.startPrometheus(t, []string{rules})
	sel := fmt.Sprintf(`namespace=%q,database=%q`, ns, name)

	s.step(t, "Metrics", func(t *testing.T) {
		eventually(t, time.Minute, "both instances scraped, pg_up 1", func() (bool, string) {
			got, err := p.tryQuery(`pg_up{` + sel + `}`)
			if err != nil {
				return false, err.Error()
			}
			up := 0
			for _, x := range got {
				if x.Value == 1 {
					up++
				}
			}
			return up == 2, fmt.Sprintf("pg_up: %v", got)
		})
		roles := map[string]float64{}
		for _, x := range p.query(t, `pg_replication_is_replica{`+sel+`}`) {
			roles[x.Labels["pod"]] = x.Value
		}
		if roles[primary] != 0 || roles[standby] != 1 || len(roles) != 2 {
			t.Errorf("pg_replication_is_replica by pod = %v, want %s 0 (status.primary) and %s 1", roles, primary, standby)
		}
		eventually(t, time.Minute, standby+" streaming, seen from the primary", func() (bool, string) {
			got, err := p.tryQuery(`pg_stat_replication_pg_wal_lsn_diff{` + sel + `,state="streaming"}`)
			if err != nil {
				return false, err.Error()
			}
			return len(got) == 1 && got[0].Labels["pod"] == primary && got[0].Labels["application_name"] == standby, fmt.Sprintf("%v", got)
		})
		// And from the standby's own receiver, which the alerts read.
		eventually(t, time.Minute, standby+"'s WAL receiver streaming", func() (bool, string) {
			got, err := p.tryQuery(`pg_stat_wal_receiver_received_tli{` + sel + `,status="streaming"}`)
			if err != nil {
				return false, err.Error()
			}
			return len(got) == 1 && got[0].Labels["pod"] == standby, fmt.Sprintf("%v", got)
		})
		for _, q := range []string{
			`pg_database_size_bytes{` + sel + `,datname="` + name + `"}`,
			`pg_settings_max_connections{` + sel + `}`,
			`sum(pg_stat_activity_count{` + sel + `})`,
		} {
			if got := p.query(t, q); len(got) == 0 {
				t.Errorf("%s: no series", q)
			} else {
				t.Logf("%s = %v", q, got[0].Value)
			}
		}
		// As its own role (pg_monitor), not the superuser: the exporter's
		// sessions on both instances (the role was created on the primary
		// by its sidecar, and replicated).
		for _, pod := range []string{primary, standby} {
			eventually(t, time.Minute, "the exporter on "+pod+" connected as postgres-exporter", func() (bool, string) {
				got := s.superSQL(ns, pod, `SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE application_name = 'metrics'`)
				return got == "postgres-exporter", "sessions as " + strconv.Quote(got)
			})
		}
		s.dashboardQueries(t, p, ns, name)
		// Every exporter series an alert reads exists on the real pods: a
		// rule over a series the exporter does not serve never fires, and
		// one compared with a bound it cannot read fires for nothing.
		for _, m := range exporterSeries(t, rules) {
			if got := p.query(t, `count(`+m+`{`+sel+`})`); len(got) == 0 {
				t.Errorf("the alerts read %s, which no instance of %s exports", m, name)
			}
		}
		// Rules evaluated before both instances were first scraped may be
		// pending (one target seen, not the other); they must clear, and
		// stay clear.
		eventually(t, time.Minute, "no alert of "+name+" pending or firing", func() (bool, string) {
			a := s.alertsOf(p, t, name)
			return len(a) == 0, p.describe(a)
		})
		for range 5 {
			// Rules run every 2 s: ten evaluations of a healthy Database.
			time.Sleep(4 * time.Second)
			if a := s.alertsOf(p, t, name); len(a) > 0 {
				t.Fatalf("alerts on a healthy Database:\n%s", p.describe(a))
			}
		}
	})

	s.step(t, "AlertFires", func(t *testing.T) {
		// Only the connections the standby opens to the primary's port:
		// the primary's probe still reaches the standby (its replies
		// come from port 5432), so the primary stays ready and no
		// failover starts; only the stream stops.
		// The standby streams from the rw Service (PRIMARY_HOST): in its
		// network namespace the address is the Service's, before
		// kube-proxy's DNAT; the primary's own address too, for a
		// connection by its pod name.
		pod, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, primary, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := s.k.CS.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := s.k.CS.CoreV1().Pods(ns).Get(ctx, standby, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rules [][]string
		for _, ip := range []string{svc.Spec.ClusterIP, pod.Status.PodIP} {
			rules = append(rules, []string{"OUTPUT", "-d", ip, "-p", "tcp", "--dport", "5432", "-j", "REJECT", "--reject-with", "tcp-reset"})
		}
		for _, r := range rules {
			if err := podIptables(standby, string(sb.UID), append([]string{"-A"}, r...)...); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		healed := false
		heal := func() {
			if healed {
				return
			}
			healed = true
			for _, r := range rules {
				if err := podIptables(standby, string(sb.UID), append([]string{"-D"}, r...)...); err != nil {
					t.Errorf("heal %s: %v", standby, err)
				}
			}
		}
		defer heal()
		t.Logf("%s's connections to %s:5432 (Service %s, pod %s) refused", standby, primary, svc.Spec.ClusterIP, pod.Status.PodIP)
		// The standby's WAL receiver stops streaming at once (its next
		// send is refused); then the alert's for: (1m).
		a := p.waitAlert(t, "DatabaseWritesBlocked", map[string]string{"namespace": ns, "database": name}, "firing", 5*time.Minute)
		t.Logf("DatabaseWritesBlocked firing %s after the cut (value %s)", time.Since(t0).Round(time.Second), a.Value)
		if got := s.alertsOf(p, t, name); !hasAlert(got, "DatabaseStandbyNotStreaming") {
			t.Errorf("DatabaseStandbyNotStreaming neither pending nor firing with the stream cut:\n%s", p.describe(got))
		}
		heal()
		t1 := time.Now()
		eventually(t, 3*time.Minute, "the alerts of "+name+" resolved once the stream is back", func() (bool, string) {
			got := s.alertsOf(p, t, name)
			return len(got) == 0, p.describe(got)
		})
		t.Logf("resolved %s after the heal", time.Since(t1).Round(time.Second))
	})

	s.step(t, "Promotion", func(t *testing.T) {
		// The series that counts promotions (the dashboard's timeline
		// panel): a switchover starts a new timeline, which the old
		// primary, rejoined as a standby, streams.
		timeline := `max(pg_stat_wal_receiver_received_tli{` + sel + `})`
		before := p.query(t, timeline)
		if len(before) != 1 {
			t.Fatalf("%s: %v, want one value", timeline, before)
		}
		// The dashboard's count of the last 10 minutes, before: none
		// (this Database was created minutes ago, and switched over by no
		// step before this one), but counted rather than assumed.
		promotionsBefore := 0.0
		if got := p.query(t, `changes(`+timeline+`[10m:5s]) - resets(`+timeline+`[10m:5s])`); len(got) == 1 {
			promotionsBefore = got[0].Value
		}
		t0 := time.Now()
		s.switchTo(t, d, name)
		want := before[0].Value + 1
		eventually(t, 3*time.Minute, fmt.Sprintf("%s = %g", timeline, want), func() (bool, string) {
			got, err := p.tryQuery(timeline)
			if err != nil {
				return false, err.Error()
			}
			return len(got) == 1 && got[0].Value == want, fmt.Sprintf("%v", got)
		})
		// The dashboard's count: a subquery, whose steps (5 s apart) reach
		// the new timeline's first sample one step after it is scraped.
		promotions := `changes(` + timeline + `[10m:5s]) - resets(` + timeline + `[10m:5s])`
		eventually(t, 30*time.Second, fmt.Sprintf("%s = %g", promotions, promotionsBefore+1), func() (bool, string) {
			got, err := p.tryQuery(promotions)
			if err != nil {
				return false, err.Error()
			}
			return len(got) == 1 && got[0].Value == promotionsBefore+1, fmt.Sprintf("%v", got)
		})
		t.Logf("timeline %g → %g, streamed %s after the switchover was asked", before[0].Value, want, time.Since(t0).Round(time.Second))
	})
}

// installMonitoringCRDs installs the Prometheus Operator's own CRDs of
// PodMonitor and PrometheusRule (no operator: the test's Prometheus reads
// the rules itself) and waits until the API server serves them.
func (s *suite) installMonitoringCRDs(t *testing.T) {
	t.Helper()
	files, err := promcrds.Files(s.root)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, f := range files {
		crd, err := kube.ReadObject(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.k.Apply(ctx, crd); err != nil {
			t.Fatalf("apply %s: %v", filepath.Base(f), err)
		}
	}
	if err := s.k.WaitKind(ctx, gvkPodMonitor); err != nil {
		t.Fatal(err)
	}
	if err := s.k.WaitKind(ctx, gvkPrometheusRule); err != nil {
		t.Fatal(err)
	}
	t.Logf("Prometheus Operator CRDs installed: %s", strings.Join(files, ", "))
}

// ruleFile writes the groups of the PrometheusRule Crossplane applied as a
// Prometheus rule file, what the Prometheus Operator does for its server.
func (s *suite) ruleFile(t *testing.T, ns, name string) string {
	t.Helper()
	var pr *unstructured.Unstructured
	eventually(t, time.Minute, "PrometheusRule "+ns+"/"+name, func() (bool, string) {
		var err error
		pr, err = s.k.Get(context.Background(), gvkPrometheusRule, ns, name)
		return err == nil, errString(err)
	})
	groups, ok, err := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if err != nil || !ok || len(groups) == 0 {
		t.Fatalf("PrometheusRule %s/%s has no groups: %v", ns, name, err)
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), name+".rules.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// exporterSeries are the names of the exporter's series (pg_...) the rules
// in file read (their expressions, not the sentences), sorted.
func exporterSeries(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct{ Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			for _, m := range exporterName.FindAllString(r.Expr, -1) {
				names[m] = true
			}
		}
	}
	out := make([]string, 0, len(names))
	for m := range names {
		out = append(out, m)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("%s reads no exporter series", file)
	}
	return out
}

var exporterName = regexp.MustCompile(`\bpg_[a-z_]+\b`)

// alertsOf are the pending or firing alerts of one Database, by name.
func (s *suite) alertsOf(p *prometheus, t *testing.T, db string) []alert {
	t.Helper()
	var out []alert
	for _, a := range p.alerts(t) {
		if a.Labels["database"] == db {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func hasAlert(as []alert, name string) bool {
	for _, a := range as {
		if a.Name == name {
			return true
		}
	}
	return false
}

// dashboardQueries runs every query of the dashboard a platform imports
// (example/monitoring/dashboard.json) as Grafana would for this Database:
// each must run, and each that reads only the exporter's series must find
// some (the kubelet's volume stats, kube-state-metrics and ALERTS are not
// in this Prometheus, or empty on a healthy Database).
func (s *suite) dashboardQueries(t *testing.T, p *prometheus, ns, name string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.root, "example", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$namespace", ns, "$database", name)
	n := 0
	for _, panel := range d.Panels {
		for _, q := range panel.Targets {
			expr := vars.Replace(q.Expr)
			elsewhere := strings.Contains(expr, "kubelet_") || strings.Contains(expr, "kube_") || strings.Contains(expr, "ALERTS")
			if elsewhere {
				if _, err := p.tryQuery(expr); err != nil {
					t.Errorf("panel %q: %s: %v", panel.Title, expr, err)
				}
				continue
			}
			// rate() needs two scrapes of a counter: wait for them.
			eventually(t, time.Minute, fmt.Sprintf("panel %q has data", panel.Title), func() (bool, string) {
				got, err := p.tryQuery(expr)
				if err != nil {
					return false, err.Error()
				}
				return len(got) > 0, expr + ": no series"
			})
			n++
		}
	}
	t.Logf("dashboard: %d queries of its %d panels have data (the rest read the kubelet, kube-state-metrics or ALERTS)", n, len(d.Panels))
}
