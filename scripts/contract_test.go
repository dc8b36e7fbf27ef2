package scripts

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reLibpqClient is a PostgreSQL client program the script runs: it reads
// libpq's variables (PGHOST, PGUSER, ...) from the environment.
var reLibpqClient = regexp.MustCompile(`(?m)(?:^|[;&|({!]|\$\()\s*(?:psql|pg_dump|pg_dumpall|pg_restore|pg_isready|pg_basebackup)\b`)

// TestContractScripts reads every script (shparse_test.go) and holds the
// table (contract.go) to it: every variable a script reads is listed, and
// every variable listed is read; required ones are those the script
// requires; the defaults are the script's; the files read in the
// directories the function fills are listed; and the script's header names
// every variable of its entry.
func TestContractScripts(t *testing.T) {
	files := Files()
	lib := parseLibrary(files[Lib])

	var names []string
	for _, s := range Contract {
		names = append(names, s.Name)
	}
	if d := cmp.Diff(slices.DeleteFunc(Names(), func(n string) bool { return n == Lib }), slices.Sorted(slices.Values(names))); d != "" {
		t.Errorf("the table has one entry per script but lib.sh (-scripts +table):\n%s", d)
	}

	// The directories the function fills: a variable with files anywhere.
	dirs := map[string]bool{}
	for _, s := range Contract {
		for _, v := range s.Env {
			if v.Files != nil {
				dirs[v.Name] = true
			}
		}
	}

	for _, s := range Contract {
		t.Run(s.Name, func(t *testing.T) {
			text, ok := files[s.Name]
			if !ok {
				t.Fatalf("no script %s", s.Name)
			}
			used := lib.used(text)
			reads := envReads(used)
			listed := map[string]Var{}
			for _, v := range s.Env {
				if _, dup := listed[v.Name]; dup {
					t.Errorf("%s is listed twice", v.Name)
				}
				listed[v.Name] = v
				if v.Meaning == "" {
					t.Errorf("%s: no meaning", v.Name)
				}
			}

			// Read ⇔ listed. What only libpq reads is not in the text:
			// the script must run a client program instead.
			var want []string
			for _, v := range s.Env {
				if v.Libpq && !reads[v.Name] {
					if !reLibpqClient.MatchString(used) {
						t.Errorf("%s is libpq's, but the script runs no PostgreSQL client", v.Name)
					}
					continue
				}
				want = append(want, v.Name)
			}
			if d := cmp.Diff(slices.Sorted(slices.Values(want)), slices.Sorted(maps.Keys(reads))); d != "" {
				t.Errorf("the variables %s reads (-table +script; + a variable the table misses, - one the script never reads; shparse_test.go says how it reads):\n%s", s.Name, d)
			}

			// Required ⇔ required by the script.
			required := map[string]bool{}
			for _, m := range reRequireEnv.FindAllStringSubmatch(used, -1) {
				for n := range strings.FieldsSeq(m[1]) {
					required[n] = true
				}
			}
			checked := maps.Clone(required)
			for _, m := range reRequireInt.FindAllStringSubmatch(used, -1) {
				checked[m[1]] = true
			}
			for _, v := range s.Env {
				switch {
				case v.Need == Required && !checked[v.Name]:
					t.Errorf("%s is required in the table, but the script neither require_env's nor require_int's it", v.Name)
				case v.Need != Required && required[v.Name]:
					t.Errorf("%s is %s in the table, but the script require_env's it", v.Name, v.Need)
				}
				if v.When != "" {
					name, _, ok := strings.Cut(v.When, "=")
					if _, listed := listed[name]; !ok || !listed {
						t.Errorf("%s: When %q is not NAME=VALUE of a variable of the script", v.Name, v.When)
					}
				}
			}

			// Defaults: ${NAME:-default} as the table says.
			written := defaults(used)
			for _, v := range s.Env {
				if v.Need == Required {
					continue
				}
				for _, d := range written[v.Name] {
					if d != v.Default {
						t.Errorf("%s: the script defaults it to %q, the table to %q", v.Name, d, v.Default)
					}
				}
				if v.Default != "" && len(written[v.Name]) == 0 {
					t.Errorf("%s: the table defaults it to %q; the script writes no ${%s:-...}", v.Name, v.Default, v.Name)
				}
			}

			// Files read in the directories the function fills.
			gotFiles := fileReads(used, dirs)
			wantFiles := map[string][]string{}
			for _, v := range s.Env {
				for _, f := range v.Files {
					wantFiles[v.Name] = append(wantFiles[v.Name], f.Name)
					if f.Meaning == "" {
						t.Errorf("%s/%s: no meaning", v.Name, f.Name)
					}
				}
				slices.Sort(wantFiles[v.Name])
			}
			if d := cmp.Diff(wantFiles, gotFiles, cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })); d != "" {
				t.Errorf("the files %s reads in the directories the function fills (-table +script):\n%s", s.Name, d)
			}

			// The header, the script's own account of its environment.
			h := header(text)
			for _, v := range s.Env {
				if !regexp.MustCompile(`\b` + v.Name + `\b`).MatchString(h) {
					t.Errorf("%s: the header comment of %s does not name it", v.Name, s.Name)
				}
			}
		})
	}
}

// TestContractParser pins what the reader of shparse_test.go finds in the
// shapes the scripts use, so that a change to it is a change on purpose.
func TestContractParser(t *testing.T) {
	lib := parseLibrary(`# comment $NOT_READ
STATE_DIR=${STATE_DIR:-/tmp}
STATE_FILE="$STATE_DIR/state"
UNUSED="$NEVER"
if [[ -n ${ALWAYS:-} ]]; then PATH="/x:$PATH"; fi
helper() {
	printf '%s\n' "$HELPER_READ" "$STATE_FILE"
}
unused_helper() {
	echo "$NOT_CALLED"
}
`)
	script := `#!/usr/bin/env bash
# HEADER_ONLY is only named here.
require_env A B
require_int C 1
D=${D:-5}
OWN="$E/x"
local TZ=UTC
x=$(helper)
((F > 0)) && echo "$((G + 1))"
echo "coalesce((SELECT H FROM t))" "${!indirect}" "${#len}" "$lower"
echo "SELECT unused_helper FROM t" "$OWN" "${BASH_REMATCH[1]}" "$SECONDS"
for ((k = 0; k < I; k++)); do :; done
cat "$SECRET/key" "${CONF:-$here}/file.conf"
`
	used := lib.used(script)
	want := []string{"A", "ALWAYS", "B", "C", "CONF", "D", "E", "F", "G", "HELPER_READ", "I", "SECRET", "STATE_DIR"}
	if d := cmp.Diff(want, slices.Sorted(maps.Keys(envReads(used)))); d != "" {
		t.Errorf("envReads (-want +got):\n%s", d)
	}
	wantFiles := map[string][]string{"SECRET": {"key"}, "CONF": {"file.conf"}}
	if d := cmp.Diff(wantFiles, fileReads(used, map[string]bool{"SECRET": true, "CONF": true})); d != "" {
		t.Errorf("fileReads (-want +got):\n%s", d)
	}
	wantDefaults := map[string][]string{"ALWAYS": {""}, "CONF": {"$here"}, "D": {"5"}, "STATE_DIR": {"/tmp"}}
	if d := cmp.Diff(wantDefaults, defaults(used)); d != "" {
		t.Errorf("defaults (-want +got):\n%s", d)
	}
}
