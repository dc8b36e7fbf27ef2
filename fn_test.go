package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/example/function-database/internal/wire"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// responseYAML renders a request or response as YAML with sorted keys, for
// golden files (wire.YAML, the debug decoder).
func responseYAML(t testing.TB, rsp proto.Message) []byte {
	t.Helper()
	y, err := wire.YAML(rsp)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("cannot read golden file (run go test -update): %v", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from the golden file; run `go test -run %s -update` and review the diff:\n%s", path, t.Name(), lineDiff(string(want), string(got)))
	}
}
