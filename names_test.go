package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestComposedNamesNeverCollide: no two Databases the function accepts in one
// namespace compose an object of the same kind and name (orders-r used to
// compose Service orders-r, the read Service of orders), and a name that
// would is refused with a Fatal naming metadata.name and the fix.
func TestComposedNamesNeverCollide(t *testing.T) {
	xr := func(name string) string {
		return "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: " + name + ", namespace: shop}\nspec: {version: \"16\", size: large, backup: {enabled: true}}"
	}
	cases := map[string]struct {
		reason string
		name   string
		fatal  string // the reserved suffix the Fatal names; empty: accepted
	}{
		"Plain":         {"the usual name", "orders", ""},
		"ReadService":   {"orders-r would compose orders' read Service", "orders-r", "-r"},
		"Headless":      {"orders-hl would compose orders' headless Service", "orders-hl", "-hl"},
		"Credentials":   {"a composed Secret's suffix", "orders-credentials", "-credentials"},
		"Superuser":     {"a composed Secret's suffix", "orders-superuser", "-superuser"},
		"Scripts":       {"the ConfigMap's suffix", "orders-scripts", "-scripts"},
		"Backup":        {"the CronJob's suffix", "orders-backup", "-backup"},
		"Restore":       {"the restore Job's suffix", "orders-restore", "-restore"},
		"ReadInside":    {"a reserved suffix inside the name is fine", "orders-r-eu", ""},
		"SuffixLookout": {"ending in r without the dash is fine", "ordersr", ""},
		"Ordinal":       {"a name ending in an ordinal composes no pod name of another", "orders-1", ""},
		"ReadLonger":    {"-rw is not -r", "orders-rw", ""},
	}
	type object struct{ Kind, Name string }
	owner := map[object]string{}
	// Sorted, so that a collision names the same pair on every run.
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		tc := cases[name]
		t.Run(name, func(t *testing.T) {
			rsp := runTest(t, xrRequest(yamlStruct(t, xr(tc.name)), nil))
			if tc.fatal != "" {
				assertFatal(t, tc.reason, rsp, "metadata.name", `must not end in "`+tc.fatal+`"`, `e.g. "`+tc.name+`-db"`)
				return
			}
			if r := rsp.GetResults(); len(r) != 0 {
				t.Fatalf("%s: unexpected results %v", tc.reason, r)
			}
			for rn, r := range rsp.GetDesired().GetResources() {
				o := object{r.GetResource().GetFields()["kind"].GetStringValue(), stringAt(r.GetResource(), "metadata", "name")}
				if prev, ok := owner[o]; ok {
					t.Errorf("%s: Databases %s and %s both compose %s %s", tc.reason, prev, tc.name, o.Kind, o.Name)
				}
				owner[o] = tc.name + " (" + rn + ")"
			}
		})
	}

	// The claim of a legacy XR is checked the same way.
	legacy := "apiVersion: legacy.example.com/v1\nkind: XDatabase\nmetadata: {name: orders-r-abcde, labels: {crossplane.io/claim-name: orders-r, crossplane.io/claim-namespace: shop}}\nspec: {version: \"16\", size: small}"
	assertFatal(t, "a legacy claim named orders-r", runTest(t, xrRequest(yamlStruct(t, legacy), nil)), "metadata.labels[crossplane.io/claim-name]", `must not end in "-r"`)
}

// TestReservedSQLNames: a Database whose SQL name (its app role and
// database) PostgreSQL or the Database already has could never bootstrap
// (CREATE ROLE or CREATE DATABASE fails, or PostgreSQL refuses a pg_* role):
// the function refuses it with a Fatal naming the field and the fix, and
// both XRDs' CEL rules list the same names and prefix.
func TestReservedSQLNames(t *testing.T) {
	xr := func(name string) string {
		return "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: " + name + ", namespace: shop}\nspec: {version: \"16\", size: small}"
	}
	refused := append(slices.Clone(reservedSQLNames), "pg-orders")
	for _, name := range refused {
		t.Run(name, func(t *testing.T) {
			assertFatal(t, name, runTest(t, xrRequest(yamlStruct(t, xr(name)), nil)), "metadata.name", "names the Database's SQL role and database", `e.g. "`+strings.TrimPrefix(name, "pg-")+`-db"`)
		})
	}
	for _, name := range []string{"postgresql", "my-postgres", "orders-pg-1", "replicators", "monitor", "postgres-exporter", "publication"} {
		if rs := runTest(t, xrRequest(yamlStruct(t, xr(name)), nil)).GetResults(); len(rs) != 0 {
			t.Errorf("%s: refused: %v", name, rs)
		}
	}
	// The roles the function creates: reserved, or out of reach of a
	// Database's SQL name (lower case letters, digits and '_').
	for _, role := range []string{superuser, replicationUser, monitorUser} {
		if !reservedSQLName(strings.ReplaceAll(role, "_", "-")) && regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(role) {
			t.Errorf("role %s could be a Database's SQL name", role)
		}
	}
	for _, xrd := range []string{"example/xrd.yaml", "example/legacy/xrd.yaml"} {
		x := readYAMLStruct(t, xrd)
		found := 0
		for _, v := range x.GetFields()["spec"].GetStructValue().GetFields()["versions"].GetListValue().GetValues() {
			schema := structAt(v.GetStructValue(), "schema", "openAPIV3Schema")
			for _, r := range schema.GetFields()["x-kubernetes-validations"].GetListValue().GetValues() {
				rule := r.GetStructValue().GetFields()["rule"].GetStringValue()
				if !strings.Contains(rule, "startsWith('"+reservedSQLPrefix+"')") {
					continue
				}
				found++
				quoted := make([]string, len(reservedSQLNames))
				for i, n := range reservedSQLNames {
					quoted[i] = "'" + n + "'"
				}
				if want := "self.metadata.name in [" + strings.Join(quoted, ", ") + "]"; !strings.Contains(rule, want) {
					t.Errorf("%s: the reserved-name rule %q does not hold %s", xrd, rule, want)
				}
			}
		}
		if found != 1 {
			t.Errorf("%s: want one reserved-name rule at the schema's root, found %d", xrd, found)
		}
	}
}

// TestReservedSuffixes: every suffix names.go composes a name with is
// reserved by the function and by the CEL rule of both XRDs, so admission
// and the function refuse the same names.
func TestReservedSuffixes(t *testing.T) {
	inNames := suffixesInNamesGo(t)
	sorted := func(s []string) []string { return slices.Sorted(slices.Values(s)) }
	if d := cmp.Diff(inNames, sorted(reservedSuffixes)); d != "" {
		t.Errorf("suffixes composed in names.go vs reservedSuffixes (-names.go +reserved):\n%s", d)
	}
	for _, xrd := range []string{"example/xrd.yaml", "example/legacy/xrd.yaml"} {
		got := xrdReservedSuffixes(t, xrd)
		if d := cmp.Diff(inNames, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: suffixes its CEL rule refuses (-names.go +xrd):\n%s", xrd, d)
		}
	}
}

// suffixesInNamesGo returns, sorted, every string that names.go appends to
// db.Name: the suffix constants and any literal in an expression db.Name +
// "...", so that a new composed name cannot slip past the reserved list.
func suffixesInNamesGo(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec) //nolint:forcetypeassert // const specs are value specs
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						consts[n.Name] = v
					}
				}
			}
		}
	}
	set := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		be, ok := n.(*ast.BinaryExpr)
		if !ok || be.Op != token.ADD {
			return true
		}
		sel, ok := be.X.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Name" {
			return true
		}
		switch y := be.Y.(type) {
		case *ast.BasicLit:
			v, _ := strconv.Unquote(y.Value)
			// podName appends "-" and an ordinal: pod names cannot
			// collide (the ordinal is all digits), and a pod is no kind
			// a Database composes under its own name.
			if v != "-" {
				set[v] = true
			}
		case *ast.Ident:
			v, ok := consts[y.Name]
			if !ok {
				t.Errorf("names.go appends %s to db.Name, which is no string constant of names.go", y.Name)
			}
			set[v] = true
		}
		return true
	})
	if len(set) == 0 {
		t.Fatal("found no composed name suffix in names.go")
	}
	return slices.Sorted(maps.Keys(set))
}

// xrdReservedSuffixes parses xrd and returns, sorted, the suffixes its root
// CEL rule on metadata.name refuses.
func xrdReservedSuffixes(t *testing.T, xrd string) []string {
	t.Helper()
	x := readYAMLStruct(t, xrd)
	var out []string
	rules := 0
	for _, v := range x.GetFields()["spec"].GetStructValue().GetFields()["versions"].GetListValue().GetValues() {
		schema := structAt(v.GetStructValue(), "schema", "openAPIV3Schema")
		for _, r := range schema.GetFields()["x-kubernetes-validations"].GetListValue().GetValues() {
			rule := r.GetStructValue().GetFields()["rule"].GetStringValue()
			if !strings.Contains(rule, "self.metadata.name.endsWith(s)") {
				continue
			}
			rules++
			m := regexp.MustCompile(`^!\[([^\]]*)\]\.exists\(s, self\.metadata\.name\.endsWith\(s\)\)$`).FindStringSubmatch(rule)
			if m == nil {
				t.Fatalf("%s: reserved-suffix rule %q is not of the form ![...].exists(s, self.metadata.name.endsWith(s))", xrd, rule)
			}
			for _, lit := range strings.Split(m[1], ",") {
				lit = strings.TrimSpace(lit)
				if len(lit) < 2 || lit[0] != '\'' || lit[len(lit)-1] != '\'' {
					t.Fatalf("%s: %q in the reserved-suffix rule is not a quoted string", xrd, lit)
				}
				out = append(out, lit[1:len(lit)-1])
			}
		}
	}
	if rules != 1 {
		t.Fatalf("%s: want one reserved-suffix rule at the schema's root, found %d", xrd, rules)
	}
	slices.Sort(out)
	return out
}
