package main

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/scripts"
)

// TestConfigHash: the pods' config hash (which rolls every instance when it
// changes) covers only what a running instance picks up by restarting: the
// scripts its containers run and postmaster-context settings. A reloadable
// setting, a job's script or the initialized marker changes the ConfigMap
// and nothing else (they used to restart every primary).
func TestConfigHash(t *testing.T) {
	input := func(settings string) string {
		return "apiVersion: database.fn.example.com/v1beta1\nkind: Input\ntiers: {medium: {settings: {" + settings + "}}}\n"
	}
	cases := map[string]struct {
		reason  string
		input   string
		restart bool
	}{
		"Reloadable":      {"work_mem is reloaded", input(`work_mem: "64MB"`), false},
		"ReloadableMany":  {"planner and WAL settings are reloaded", input(`random_page_cost: "1.1", max_wal_size: "2GB", log_min_duration_statement: "500"`), false},
		"Postmaster":      {"max_connections needs a restart", input(`max_connections: "300"`), true},
		"SharedBuffers":   {"shared_buffers needs a restart", input(`shared_buffers: "300MB"`), true},
		"UnknownSetting":  {"a parameter the table does not know restarts (the safe side)", input(`pg_stat_statements.max: "10000"`), true},
		"ReloadAndMaster": {"one postmaster setting among reloadable ones restarts", input(`work_mem: "64MB", max_prepared_transactions: "10"`), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, validXR)
			before := runTest(t, req)
			req.Input = yamlStruct(t, tc.input)
			after := runTest(t, req)
			h0 := desiredSTS(t, before).Spec.Template.Annotations[annotationConfigHash]
			h1 := desiredSTS(t, after).Spec.Template.Annotations[annotationConfigHash]
			if (h0 != h1) != tc.restart {
				t.Errorf("%s: config hash %s -> %s, want a change: %v", tc.reason, h0, h1, tc.restart)
			}
			c0 := decodeInto[corev1.ConfigMap](t, before.GetDesired().GetResources()[string(rnScripts)].GetResource()).Data[keyPostgresqlConf]
			c1 := decodeInto[corev1.ConfigMap](t, after.GetDesired().GetResources()[string(rnScripts)].GetResource()).Data[keyPostgresqlConf]
			if c0 == c1 {
				t.Errorf("%s: postgresql.conf did not change", tc.reason)
			}
			// Only the hash annotation and the ConfigMap may differ.
			delete(before.Desired.Resources, string(rnScripts))
			delete(after.Desired.Resources, string(rnScripts))
			for _, r := range []*fnv1.Resource{before.Desired.Resources[string(rnStatefulSet)], after.Desired.Resources[string(rnStatefulSet)]} {
				delete(structAt(r.GetResource(), "spec", "template", "metadata", "annotations").GetFields(), annotationConfigHash)
			}
			if d := cmp.Diff(desiredOf(before), desiredOf(after), protocmp.Transform()); d != "" {
				t.Errorf("%s: a settings change changed more than the ConfigMap and the hash (-before +after):\n%s", tc.reason, d)
			}
		})
	}

	// Scripts: only the instances' own ones enter the hash.
	for _, name := range scripts.Names() {
		files := maps.Clone(scriptFiles)
		files[name] += "\n# changed\n"
		changed := digest(instanceScripts(files)) != instanceScriptsHash
		want := slices.Contains([]string{scripts.Entrypoint, scripts.Probe, scripts.PreStop, scripts.SyncPasswords, scripts.Lib}, name)
		if changed != want {
			t.Errorf("a change of %s changes the instances' scripts hash: %v, want %v", name, changed, want)
		}
	}
}

// TestParamContexts checks paramContexts against the server's own contexts
// (`postgres --describe-config`): a parameter the table reloads must be
// reloadable, one it restarts for must need a restart.
func TestParamContexts(t *testing.T) {
	bin, err := exec.LookPath("postgres")
	if err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres"); len(m) > 0 {
			bin, err = m[len(m)-1], nil
		}
	}
	if err != nil {
		// A full run (hack/test.sh, CI) must not skip it.
		if os.Getenv("CI") != "" || os.Getenv("FNDB_REQUIRE_TOOLS") != "" {
			t.Fatalf("postgres not found (hack/install-postgres.sh installs it): %v", err)
		}
		t.Skipf("postgres not found (hack/install-postgres.sh installs it): %v", err)
	}
	out, err := exec.Command(bin, "--describe-config").Output()
	if err != nil {
		t.Fatalf("%s --describe-config: %v", bin, err)
	}
	server := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Split(line, "\t"); len(f) > 1 {
			server[f[0]] = f[1]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(paramContexts)) {
		ctx, ok := server[name]
		switch {
		case !ok:
			t.Errorf("%s: not a parameter of %s", name, bin)
		case (ctx == "postmaster") != (paramContexts[name] == contextPostmaster):
			t.Errorf("%s: context %s on the server, but the table says postmaster: %v", name, ctx, paramContexts[name] == contextPostmaster)
		}
	}
	// Every setting the built-in tiers and the WAL bounds write is in the
	// table: none is restarted for only because it is unknown.
	for size, tr := range builtinTiers() {
		for k := range tr.Settings {
			if _, ok := paramContexts[k]; !ok {
				t.Errorf("tier %s setting %s is not in paramContexts", size, k)
			}
		}
	}
	for k := range walSettings(minVolume) {
		if _, ok := paramContexts[k]; !ok {
			t.Errorf("WAL setting %s is not in paramContexts", k)
		}
	}
}
