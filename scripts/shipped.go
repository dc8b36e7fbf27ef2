package scripts

import (
	"maps"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Shipped returns the scripts as the function ships them in the scripts
// ConfigMap and the pods run them: Files() without their comments and blank
// lines, parsed and printed again by mvdan.cc/sh (the parser and printer of
// shfmt), under a one-line header that names the source.
//
// Why: the comments are about 40 % of the scripts' bytes, and every
// Database's ConfigMap holds them: in each response the function encodes,
// in what Crossplane core applies, and in etcd once per Database. Parsed and
// printed, the program is the same one (TestShippedSameProgram compares the
// syntax trees); only a line number in a bash error message changes, and it
// is a line of the shipped copy (`kubectl get configmap N-scripts`).
//
// A script the parser refuses would be shipped as it is, never dropped;
// TestShippedSameProgram fails on it.
func Shipped() map[string]string {
	return maps.Clone(shipped())
}

var shipped = sync.OnceValue(func() map[string]string {
	out := Files()
	for name, src := range out {
		if s, err := strip(name, src); err == nil {
			out[name] = s
		}
	}
	return out
})

// strip parses a script without its comments and prints it back, with tabs
// for indentation.
func strip(name, src string) (string, error) {
	f, err := parse(name, src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# " + name + " of function-database, as shipped: the comments are in its source (scripts/" + name + ")\n")
	if err := syntax.NewPrinter(syntax.Indent(0)).Print(&b, f); err != nil {
		return "", err
	}
	return b.String(), nil
}

// parse reads a script as bash, leaving its comments out.
func parse(name, src string) (*syntax.File, error) {
	return syntax.NewParser(syntax.KeepComments(false), syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), name)
}
