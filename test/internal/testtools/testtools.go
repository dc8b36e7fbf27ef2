// Package testtools finds the repository and the pinned tools (crossplane CLI,
// Crossplane core, crane) for the render and package tests.
package testtools

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Root returns the repository root: the nearest directory at or above the
// working directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Bin returns the path of a pinned tool: $env when set, else
// <cache>/bin/<name> where hack/tools.sh builds it (<cache> is
// $FUNCTION_DATABASE_CACHE or $HOME/.cache/function-database). It fails when
// there is no such executable.
func Bin(env, name string) (string, error) {
	path := os.Getenv(env)
	if path == "" {
		cache := os.Getenv("FUNCTION_DATABASE_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			cache = filepath.Join(home, ".cache", "function-database")
		}
		path = filepath.Join(cache, "bin", name)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w (build it with hack/tools.sh, or set %s)", name, err, env)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s: %s is not an executable file", name, path)
	}
	return path, nil
}

// Missing stops a test whose tools are missing: a failure in a full run
// (hack/test.sh sets FNDB_REQUIRE_TOOLS, CI sets CI; hack/test.sh builds the
// tools first, so a missing one is a broken install), a skip in a run
// narrowed on purpose (go test alone). err says what to build.
func Missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") != "" || os.Getenv("FNDB_REQUIRE_TOOLS") != "" {
		t.Fatalf("tools missing in a full run: %v", err)
	}
	t.Skipf("tools missing (hack/test.sh builds them): %v", err)
}

// KillWithParent makes the process cmd starts die with the test binary, even
// when the test binary dies without running its cleanups (a panic, -timeout).
func KillWithParent(cmd *exec.Cmd) {
	killWithParent(cmd)
}
