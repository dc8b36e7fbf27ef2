package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"testing"
)

// TestNoSharedPackageState keeps the scenarios' state out of package
// variables. The suite's one package variable is env, the fixture TestMain
// builds before any test runs (mainE2E alone sets it): what a test group
// shares with another lives in the suite (guarded by its mutex or started
// once by a fixture), and what the steps of one test share lives in that
// test (a table of steps and the variables it hands them). Any other package
// variable must be a table of constants: a GroupVersionKind, a regular
// expression, a composite literal of values; and nothing may write one.
//
// It has no build tag: `go test .` in e2e/ (hack/e2e.sh, before the suite)
// runs it alone, without a cluster.
func TestNoSharedPackageState(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
	}

	// The package's variables, and what each is.
	vars := map[string]token.Position{}
	for _, af := range parsed {
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					vars[n.Name] = fset.Position(n.Pos())
					if n.Name == "env" {
						continue
					}
					if i >= len(vs.Values) {
						t.Errorf("%s: package variable %s has no value: a test's or the suite's state belongs in the test or the suite", fset.Position(n.Pos()), n.Name)
						continue
					}
					if why := notConstant(vs.Values[i]); why != "" {
						t.Errorf("%s: package variable %s is %s: a test's or the suite's state belongs in the test or the suite", fset.Position(n.Pos()), n.Name, why)
					}
				}
			}
		}
	}
	if _, ok := vars["env"]; !ok {
		t.Error("no package variable env: the suite's fixture moved; update this test")
	}

	// Nothing writes a package variable, but mainE2E its env.
	var writes []string
	for _, af := range parsed {
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			local := declaredIn(fd)
			report := func(e ast.Expr, how string) {
				id := rootIdent(e)
				if id == nil || local[id.Name] {
					return
				}
				if _, ok := vars[id.Name]; !ok {
					return
				}
				if id.Name == "env" && fd.Name.Name == "mainE2E" && fd.Recv == nil {
					return
				}
				writes = append(writes, fset.Position(e.Pos()).String()+": "+fd.Name.Name+" "+how+" package variable "+id.Name)
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, l := range n.Lhs {
						report(l, "assigns")
					}
				case *ast.IncDecStmt:
					report(n.X, "changes")
				case *ast.UnaryExpr:
					if n.Op == token.AND {
						report(n.X, "takes the address of")
					}
				}
				return true
			})
		}
	}
	sort.Strings(writes)
	for _, w := range writes {
		t.Error(w)
	}
}

// notConstant says why a package variable's value is not a table of
// constants, or "" when it is one.
func notConstant(v ast.Expr) string {
	switch v := v.(type) {
	case *ast.CallExpr:
		if sel, ok := v.Fun.(*ast.SelectorExpr); ok {
			if pkg, ok := sel.X.(*ast.Ident); ok {
				switch pkg.Name + "." + sel.Sel.Name {
				case "kube.GVK", "regexp.MustCompile":
					return ""
				}
			}
		}
		return "the result of a call"
	case *ast.CompositeLit:
		if _, ok := v.Type.(*ast.MapType); ok {
			return "a map"
		}
		var why string
		ast.Inspect(v, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				why = "a literal with a function in it"
			case *ast.CallExpr:
				why = "a literal with a call in it"
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					why = "a literal with a pointer in it"
				}
			}
			return why == ""
		})
		return why
	case *ast.BasicLit:
		return ""
	}
	return "not a literal"
}

// rootIdent is the variable an assignment's target starts from: x in x,
// x.f, x[i], *x, (x).
func rootIdent(e ast.Expr) *ast.Ident {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x
		case *ast.SelectorExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// declaredIn is every name a function declares (receiver, parameters,
// results, :=, var, range, closures' parameters): a package variable of the
// same name is shadowed there, so writes to the name are not its.
func declaredIn(fd *ast.FuncDecl) map[string]bool {
	names := map[string]bool{}
	fields := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, f := range fl.List {
			for _, n := range f.Names {
				names[n.Name] = true
			}
		}
	}
	fields(fd.Recv)
	fields(fd.Type.Params)
	fields(fd.Type.Results)
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				names[id.Name] = true
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						names[id.Name] = true
					}
				}
			}
		case *ast.FuncLit:
			fields(n.Type.Params)
			fields(n.Type.Results)
		}
		return true
	})
	return names
}
