package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"

	"github.com/example/function-database/scripts"
)

// unreadTolerated are variables a container sends that no script it runs
// reads, known and left as they are, by container, with the reason. The
// test fails when one is no longer sent or becomes read: then it goes.
var unreadTolerated = map[string]map[string]string{}

// A scriptRun is a container of a composed workload that runs scripts.
type scriptRun struct {
	scenario string // the request it was composed for
	n, ns    string // the Database's N (its StatefulSet's name; a legacy XR's claim's) and namespace
	kind     string // StatefulSet, CronJob, Job
	object   string // its name
	objs     map[string]any
	pod      *corev1.PodSpec
	c        corev1.Container
	// how each script runs in it: "command", "readiness probe", ...
	how map[string][]string
}

// scripts are the names of the scripts the container runs, sorted.
func (r scriptRun) scripts() []string { return slices.Sorted(maps.Keys(r.how)) }

// A contractScenario is one response, decoded.
type contractScenario struct {
	name string
	composedStack
}

// contractScenarios are requests that compose every workload that runs a
// script, in every shape: each example, new and running, with its
// Composition's input and without; the failover Job; a switchover's Job.
func contractScenarios(t *testing.T) []contractScenario {
	t.Helper()
	var out []contractScenario
	for _, ex := range allExamples(t) {
		for _, running := range []bool{false, true} {
			for _, withInput := range []bool{true, false} {
				name := ex.name + map[bool]string{true: "/running", false: "/new"}[running] + map[bool]string{true: "", false: "/no-input"}[withInput]
				out = append(out, contractScenario{name, stackOf(t, ex, withInput, running)})
			}
		}
	}
	stack := func(name string, req *fnv1.RunFunctionRequest, cluster []*structpb.Struct) contractScenario {
		rsp := runTestIn(t, req, cluster)
		s := contractScenario{name, composedStack{xr: req.GetObserved().GetComposite().GetResource(), rsp: rsp, objs: decodedDesired(t, rsp)}}
		if _, ok := s.objs[rnFailover]; !ok {
			t.Fatalf("%s: no failover Job composed", name)
		}
		return s
	}
	cluster := func(ready ...bool) []*structpb.Struct {
		return append(slices.Clone(exampleCluster(t)), instancePodsReady(t, ready...)...)
	}
	out = append(out, stack("large/primary-lost", largeSteady(t), cluster(false, true, true)))
	req := largeSteady(t)
	setSpecField(req, "primary", structpb.NewNumberValue(1))
	return append(out, stack("large/switchover", req, cluster(true, true, true)))
}

// scriptRuns are the containers running scripts of every contract scenario,
// in a stable order.
func scriptRuns(t *testing.T) []scriptRun {
	t.Helper()
	var out []scriptRun
	for _, s := range contractScenarios(t) {
		objs := map[string]any{}
		for _, obj := range s.objs {
			objs[objectKey(obj)] = obj
		}
		sts, ok := s.objs[rnStatefulSet].(*appsv1.StatefulSet)
		if !ok {
			t.Fatalf("%s: no StatefulSet composed", s.name)
		}
		for _, rn := range slices.Sorted(maps.Keys(s.objs)) {
			spec := podSpecOf(s.objs[rn])
			if spec == nil {
				continue
			}
			for _, c := range allContainers(spec) {
				how := scriptsOf(c)
				if len(how) == 0 {
					continue
				}
				// pgbackrest.sh is run by postgres (its archive_command) and
				// by the sidecar (archive_round) once the ConfigMap holds
				// pgbackrest.conf: it reads their environment.
				if cm, ok := s.objs[rnScripts].(*corev1.ConfigMap); ok && cm.Data[keyPgbackrestConf] != "" {
					switch c.Name {
					case containerPostgres:
						how[scripts.Archive] = append(how[scripts.Archive], "archive_command")
					case containerPasswordSync:
						how[scripts.Archive] = append(how[scripts.Archive], "archive_round")
					}
				}
				out = append(out, scriptRun{
					scenario: s.name, n: sts.Name, ns: sts.Namespace,
					kind: kindOf(s.objs[rn]), object: objectName(s.objs[rn]),
					objs: objs, pod: spec, c: c, how: how,
				})
			}
		}
	}
	return out
}

// scriptsOf is which scripts a container runs, and how: its command and
// args, and its probes, name the script's file.
func scriptsOf(c corev1.Container) map[string][]string {
	out := map[string][]string{}
	find := func(how string, cmd []string) {
		for _, arg := range cmd {
			if _, ok := scripts.ContractOf(path.Base(arg)); ok {
				out[path.Base(arg)] = append(out[path.Base(arg)], how)
			}
		}
	}
	find("command", append(slices.Clone(c.Command), c.Args...))
	for how, p := range map[string]*corev1.Probe{"startup probe": c.StartupProbe, "readiness probe": c.ReadinessProbe, "liveness probe": c.LivenessProbe} {
		if p != nil && p.Exec != nil {
			find(how, p.Exec.Command)
		}
	}
	if l := c.Lifecycle; l != nil {
		for how, h := range map[string]*corev1.LifecycleHandler{"postStart hook": l.PostStart, "preStop hook": l.PreStop} {
			if h != nil && h.Exec != nil {
				find(how, h.Exec.Command)
			}
		}
	}
	for s := range out {
		slices.Sort(out[s])
	}
	return out
}

// TestContractEnv holds every container that runs a script to the contract
// table (scripts.Contract): it sends every variable a script it runs
// requires or expects, and none that no script it runs reads (nor a
// test-only one); and the files the scripts read in the directories it
// names are there, keys of the Secret or ConfigMap mounted at that path.
func TestContractEnv(t *testing.T) {
	tolerated := map[string]bool{} // container/variable, once seen
	runs := scriptRuns(t)
	for _, name := range []string{scripts.Entrypoint, scripts.Probe, scripts.PreStop, scripts.SyncPasswords, scripts.Backup, scripts.Restore, scripts.Failover, scripts.Archive} {
		if !slices.ContainsFunc(runs, func(r scriptRun) bool { return r.how[name] != nil }) {
			t.Errorf("no scenario composes a container that runs %s", name)
		}
	}
	for _, r := range runs {
		t.Run(r.scenario+"/"+r.c.Name, func(t *testing.T) {
			sent := map[string]corev1.EnvVar{}
			for _, e := range r.c.Env {
				if _, dup := sent[e.Name]; dup {
					t.Errorf("%s is sent twice", e.Name)
				}
				sent[e.Name] = e
			}
			var want []string
			for _, v := range contractVars(r, sent) {
				_, isSent := sent[v.Name]
				if v.Need == scripts.Required || v.Need == scripts.Expected || (isSent && v.Need != scripts.TestOnly) {
					want = append(want, v.Name)
				}
			}
			for name := range sent {
				if _, ok := unreadTolerated[r.c.Name][name]; ok && !slices.Contains(want, name) {
					want = append(want, name)
					tolerated[r.c.Name+"/"+name] = true
				}
			}
			slices.Sort(want)
			want = slices.Compact(want)
			if d := gocmp.Diff(want, slices.Sorted(maps.Keys(sent))); d != "" {
				t.Errorf("container %s running %v: its env (-want +got; - a variable a script it runs requires or expects, + one no script it runs reads, or a test-only one):\n%s", r.c.Name, r.scripts(), d)
			}
			checkContractFiles(t, r, sent)
		})
	}
	for c, vars := range unreadTolerated {
		for name := range vars {
			if !tolerated[c+"/"+name] {
				t.Errorf("unreadTolerated: container %s no longer sends %s unread: remove it from the list", c, name)
			}
		}
	}
}

// contractVars are the variables of the scripts r runs, the strongest need
// first when two scripts read one (a var whose When does not hold is left
// out: the script does not read it then).
func contractVars(r scriptRun, sent map[string]corev1.EnvVar) []scripts.Var {
	byName := map[string]scripts.Var{}
	for _, name := range r.scripts() {
		s, _ := scripts.ContractOf(name)
		for _, v := range s.Env {
			if v.When != "" {
				n, val, _ := strings.Cut(v.When, "=")
				if e, ok := sent[n]; !ok || e.Value != val {
					continue
				}
			}
			if have, ok := byName[v.Name]; !ok || v.Need < have.Need {
				byName[v.Name] = v
			}
		}
	}
	return slices.SortedFunc(maps.Values(byName), func(a, b scripts.Var) int { return cmp.Compare(a.Name, b.Name) })
}

// checkContractFiles: the files a script reads in a directory the function
// fills are keys of what is mounted there (an optional one may be absent).
func checkContractFiles(t *testing.T, r scriptRun, sent map[string]corev1.EnvVar) {
	t.Helper()
	for _, name := range r.scripts() {
		s, _ := scripts.ContractOf(name)
		for _, v := range s.Env {
			if len(v.Files) == 0 {
				continue
			}
			e, ok := sent[v.Name]
			if !ok {
				continue // TestContractEnv says whether it must be sent
			}
			src, keys, err := mountedKeys(r, e.Value)
			if err != nil {
				t.Errorf("%s: %s=%s: %v", name, v.Name, e.Value, err)
				continue
			}
			for _, f := range v.Files {
				if f.Need != scripts.Optional && !keys[f.Name] {
					t.Errorf("%s reads $%s/%s, but %s has no key %s", name, v.Name, f.Name, src, f.Name)
				}
			}
		}
	}
}

// mountedKeys are the keys of the Secret or ConfigMap mounted at dir in r's
// container, as composed in the same response.
func mountedKeys(r scriptRun, dir string) (string, map[string]bool, error) {
	i := slices.IndexFunc(r.c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
	if i < 0 {
		return "", nil, fmt.Errorf("nothing is mounted there")
	}
	j := slices.IndexFunc(r.pod.Volumes, func(v corev1.Volume) bool { return v.Name == r.c.VolumeMounts[i].Name })
	if j < 0 {
		return "", nil, fmt.Errorf("no volume %s", r.c.VolumeMounts[i].Name)
	}
	keys := map[string]bool{}
	switch vs := r.pod.Volumes[j].VolumeSource; {
	case vs.Secret != nil:
		src := "Secret " + vs.Secret.SecretName
		sec, ok := r.objs[src].(*corev1.Secret)
		if !ok {
			return src, nil, fmt.Errorf("%s is not composed", src)
		}
		for k := range sec.Data {
			keys[k] = true
		}
		for k := range sec.StringData {
			keys[k] = true
		}
		return src, keys, nil
	case vs.ConfigMap != nil:
		src := "ConfigMap " + vs.ConfigMap.Name
		cm, ok := r.objs[src].(*corev1.ConfigMap)
		if !ok {
			return src, nil, fmt.Errorf("%s is not composed", src)
		}
		for k := range cm.Data {
			keys[k] = true
		}
		return src, keys, nil
	}
	return "", nil, fmt.Errorf("volume %s is no Secret or ConfigMap", r.pod.Volumes[j].Name)
}

// objectKey is "Kind name" of a decoded composed object.
func objectKey(obj any) string {
	switch o := obj.(type) {
	case *corev1.Secret:
		return "Secret " + o.Name
	case *corev1.ConfigMap:
		return "ConfigMap " + o.Name
	}
	return kindOf(obj)
}

func objectName(obj any) string {
	if o, ok := obj.(interface{ GetName() string }); ok {
		return o.GetName()
	}
	return ""
}

func kindOf(obj any) string {
	switch obj.(type) {
	case *appsv1.StatefulSet:
		return "StatefulSet"
	case *batchv1.CronJob:
		return "CronJob"
	case *batchv1.Job:
		return "Job"
	}
	return fmt.Sprintf("%T", obj)
}

// decodedDesired are a response's desired composed resources, decoded.
func decodedDesired(t *testing.T, rsp *fnv1.RunFunctionResponse) map[resource.Name]any {
	t.Helper()
	out := map[resource.Name]any{}
	for name, r := range rsp.GetDesired().GetResources() {
		obj, err := decodeTyped(r.GetResource())
		if err != nil {
			t.Fatalf("desired composed resource %q: %v", name, err)
		}
		out[resource.Name(name)] = obj
	}
	return out
}

// contractDoc is generated from the contract table and the builders.
const contractDoc = "notes/CONTRACT.md"

// TestGoldenContract: notes/CONTRACT.md is the contract table as Markdown,
// with what the builders send for an example; -update (make golden) writes
// it.
func TestGoldenContract(t *testing.T) {
	got := contractMarkdown(scriptRuns(t))
	if *update {
		if err := os.WriteFile(contractDoc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(contractDoc)
	if err != nil {
		t.Fatalf("cannot read %s (run go test -run %s -update .): %v", contractDoc, t.Name(), err)
	}
	if string(want) != got {
		t.Errorf("%s is stale: it is generated from scripts/contract.go and the builders; run `go test -run %s -update .` (or make golden) and review the diff:\n%s", contractDoc, t.Name(), lineDiff(string(want), got))
	}
}

// contractMarkdown renders scripts.Contract, and what runs enumerates of
// the builders: where each script runs and what it is sent.
func contractMarkdown(runs []scriptRun) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("<!-- Generated by TestGoldenContract (contract_test.go) from the table in scripts/contract.go and the builders.\n")
	p("     Do not edit: change the table (or a builder), then run make golden. -->\n\n")
	p("# The pod contract\n\n")
	p("What each script the pods and jobs run reads from its environment and from the files the function\n")
	p("mounts: the table `scripts.Contract` (`scripts/contract.go`), held to the scripts by\n")
	p("`TestContractScripts` (`scripts/contract_test.go`) and to the builders by `TestContractEnv`\n")
	p("(`contract_test.go`). The scripts are embedded in the function and shipped in the ConfigMap\n")
	p("`N-scripts`, mounted at `SCRIPTS_DIR`; a container runs `bash $SCRIPTS_DIR/<name>`, and the script\n")
	p("sources `lib.sh` from its own directory (what it reads through lib.sh's functions is its own).\n\n")
	p("Needs: **required**, the script refuses to run without it; **expected**, the script runs without\n")
	p("it but a part the pods rely on is then off; the function always sends both. **optional**, the\n")
	p("script's default fits the pods; the function may send another value. **test only**, an override\n")
	p("for the scripts' tests; the function never sends it. The values sent are those the function\n")
	p("composes for the Database each section names (an example of `example/`).\n")
	for _, s := range scripts.Contract {
		var mine []scriptRun
		for _, r := range runs {
			if r.how[s.Name] != nil && (len(mine) == 0 || r.n == mine[0].n) {
				mine = append(mine, r)
			}
		}
		p("\n## %s\n\n%s\n\n", s.Name, s.Does)
		if len(mine) == 0 {
			p("Run by no workload the function composes.\n")
			continue
		}
		var where []string
		for _, r := range runs {
			if r.how[s.Name] != nil {
				obj := "N" + strings.TrimPrefix(r.object, r.n)
				where = append(where, fmt.Sprintf("%s `%s`, container `%s` (%s)", r.kind, obj, r.c.Name, strings.Join(r.how[s.Name], ", ")))
			}
		}
		slices.Sort(where)
		p("Run by: %s. Values sent: Database `%s` in namespace `%s`.\n\n", strings.Join(slices.Compact(where), "; "), mine[0].n, mine[0].ns)
		p("| variable | need | default | sent | meaning |\n| --- | --- | --- | --- | --- |\n")
		var files []string
		for _, v := range s.Env {
			need := v.Need.String()
			if v.When != "" {
				need += " when `" + v.When + "`"
			}
			if v.Libpq {
				need += " (libpq)"
			}
			p("| `%s` | %s | %s | %s | %s |\n", v.Name, need, code(v.Default), sentValue(mine, v.Name), v.Meaning)
			for _, f := range v.Files {
				src := ""
				for _, r := range mine {
					if e := envOf(r.c, v.Name); e != nil {
						if name, _, err := mountedKeys(r, e.Value); err == nil {
							src = name
							break
						}
					}
				}
				if kind, name, ok := strings.Cut(src, " "); ok {
					src = kind + " `" + name + "`"
				}
				files = append(files, fmt.Sprintf("| `$%s/%s` | %s | %s | %s |\n", v.Name, f.Name, f.Need, src, f.Meaning))
			}
		}
		if len(files) > 0 {
			p("\nFiles it reads in the directories the function fills:\n\n| file | need | mounted from | meaning |\n| --- | --- | --- | --- |\n%s", strings.Join(files, ""))
		}
		seen := map[string]bool{}
		for _, r := range mine {
			if seen[r.c.Name] {
				continue
			}
			seen[r.c.Name] = true
			var unread []string
			sent := map[string]corev1.EnvVar{}
			for _, e := range r.c.Env {
				sent[e.Name] = e
			}
			for _, e := range r.c.Env {
				if !slices.ContainsFunc(contractVars(r, sent), func(v scripts.Var) bool { return v.Name == e.Name }) {
					unread = append(unread, "`"+e.Name+"`")
				}
			}
			if len(unread) > 0 {
				p("\nAlso sent to container `%s`, read by no script it runs: %s.\n", r.c.Name, strings.Join(unread, ", "))
			}
		}
	}
	p("\n## Elsewhere\n\n")
	p("What the function composes, with every name and key: `docs/composed.md` and\n")
	p("`names.go`. The function's flags: `main.go` (`--help`). The examples: `example/` (README, \"Install\").\n")
	p("How the failover Job is started and read back: `docs/failover.md`.\n")
	return b.String()
}

// code is s as inline code, or nothing.
func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

func envOf(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// sentValue is what the first of runs that sends name sends, as Markdown.
func sentValue(runs []scriptRun, name string) string {
	for _, r := range runs {
		e := envOf(r.c, name)
		switch {
		case e == nil:
			continue
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			return "field `" + e.ValueFrom.FieldRef.FieldPath + "`"
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			return "Secret `" + e.ValueFrom.SecretKeyRef.Name + "` key `" + e.ValueFrom.SecretKeyRef.Key + "`"
		case e.Value == "":
			return "(empty)"
		default:
			return "`" + e.Value + "`"
		}
	}
	return ""
}
