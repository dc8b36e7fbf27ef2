package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

// TestShippedSameProgram holds Shipped() to Files(): every script strips, the
// shipped copy is the same program (both parsed without comments and
// printed by one printer give the same text), real bash parses it (bash -n),
// and it is smaller.
func TestShippedSameProgram(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("no bash on PATH")
	}
	src, shipped := Files(), Shipped()
	if len(shipped) != len(src) {
		t.Fatalf("Shipped() has %d scripts, Files() %d", len(shipped), len(src))
	}
	dir := t.TempDir()
	var before, after int
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			if _, err := strip(name, src[name]); err != nil {
				t.Fatalf("does not strip (it would ship with its comments): %v", err)
			}
			want, got := printed(t, name, src[name]), printed(t, name, shipped[name])
			if got != want {
				t.Errorf("the shipped copy is another program:\n%s", firstDifference(want, got))
			}
			header, _, _ := strings.Cut(shipped[name], "\n")
			if !strings.HasPrefix(header, "# "+name+" ") || !strings.Contains(header, "scripts/"+name) {
				t.Errorf("header %q does not name the script's source", header)
			}
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte(shipped[name]), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bash, "-n", path).CombinedOutput(); err != nil {
				t.Errorf("bash -n: %v\n%s", err, out)
			}
			if len(shipped[name]) >= len(src[name]) {
				t.Errorf("shipped %d bytes, source %d: nothing saved", len(shipped[name]), len(src[name]))
			}
			before += len(src[name])
			after += len(shipped[name])
		})
	}
	t.Logf("scripts: %d bytes in the source, %d shipped (%.0f %%)", before, after, 100*float64(after)/float64(before))
}

// TestShippedCopies: a caller changing its copy changes no one else's.
func TestShippedCopies(t *testing.T) {
	a := Shipped()
	a[Lib] = "changed"
	if Shipped()[Lib] == "changed" {
		t.Error("Shipped() hands out its own map")
	}
}

func printed(t *testing.T, name, src string) string {
	t.Helper()
	f, err := parse(name, src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, f); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "line " + itoa(i+1) + ":\n  source:  " + al[i] + "\n  shipped: " + bl[i]
		}
	}
	return "lengths differ"
}
