package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestFiles(t *testing.T) {
	files := Files()
	onDisk, err := filepath.Glob("*.sh")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(onDisk)
	if got := Names(); strings.Join(got, ",") != strings.Join(onDisk, ",") {
		t.Errorf("Files() = %v, want every .sh of the package %v", got, onDisk)
	}
	for _, tc := range []struct {
		name       string
		executable bool // started as `bash $SCRIPTS_DIR/<name>`
	}{
		{Entrypoint, true},
		{Probe, true},
		{SyncPasswords, true},
		{Backup, true},
		{Restore, true},
		{Lib, false},
	} {
		content, ok := files[tc.name]
		if !ok {
			t.Errorf("%s: missing from Files()", tc.name)
			continue
		}
		disk, err := os.ReadFile(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if content != string(disk) {
			t.Errorf("%s: embedded content differs from the file", tc.name)
		}
		if tc.executable {
			if !strings.HasPrefix(content, "#!/usr/bin/env bash\n") {
				t.Errorf("%s: no bash shebang", tc.name)
			}
			if !strings.Contains(content, "\nset -Eeuo pipefail\n") {
				t.Errorf("%s: no `set -Eeuo pipefail`", tc.name)
			}
			if !strings.Contains(content, `. "$here/lib.sh"`) {
				t.Errorf("%s: does not source lib.sh from its own directory", tc.name)
			}
		}
	}
}

// TestShellcheck runs shellcheck (every check, style included) on all
// scripts at once, and bash -n on each.
func TestShellcheck(t *testing.T) {
	t.Parallel()
	shellcheck, err := exec.LookPath("shellcheck")
	if err != nil {
		missing(t, "shellcheck not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := Names()
	args := append([]string{"--external-sources", "--shell=bash", "--severity=style"}, names...)
	if out, err := exec.CommandContext(ctx, shellcheck, args...).CombinedOutput(); err != nil {
		t.Errorf("shellcheck %s: %v\n%s", strings.Join(names, " "), err, out)
	}
	for _, name := range names {
		if out, err := exec.CommandContext(ctx, "bash", "-n", name).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", name, err, out)
		}
	}
}

// TestScriptsRefuseBadEnvironment: missing or malformed contract variables
// stop a script at once with a message naming the variable.
func TestScriptsRefuseBadEnvironment(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		missing(t, "bash not installed")
	}
	for _, tc := range []struct {
		name   string
		script string
		args   []string
		env    []string
		want   string
	}{
		{"entrypoint without POD_NAME", Entrypoint, nil, nil, "POD_NAME must be set"},
		{"entrypoint with a pod name without ordinal", Entrypoint, nil, []string{"POD_NAME=orders", "PGDATA=/nonexistent", "PGPORT=5432", "PGHOST=/nonexistent", "DB_NAME=x", "APP_USER=x", "SCRIPTS_DIR=/nonexistent", "APP_SECRET_DIR=/nonexistent", "ADMIN_SECRET_DIR=/nonexistent"}, "does not end in -<ordinal>"},
		{"probe without mode", Probe, nil, nil, "usage: probe.sh ready|live"},
		{"backup without BACKUP_DIR", Backup, nil, []string{"PGHOST=127.0.0.1", "DB_NAME=x", "BACKUP_RETENTION=1", "DATABASE=x"}, "BACKUP_DIR must be set"},
		{"backup retention not a number", Backup, nil, []string{"PGHOST=127.0.0.1", "DB_NAME=x", "BACKUP_DIR=/nonexistent", "BACKUP_RETENTION=seven", "DATABASE=x"}, "BACKUP_RETENTION must be an integer >= 1"},
		{"restore of a path", Restore, nil, []string{"PGHOST=127.0.0.1", "PGPORT=1", "DB_NAME=x", "APP_USER=x", "RESTORE_DIR=/nonexistent"}, "RESTORE_DIR /nonexistent is not a directory"},
		{"sync without SYNC_INTERVAL number", SyncPasswords, nil, []string{"POD_NAME=x-0", "PGHOST=/x", "PGPORT=1", "PGDATA=/x", "APP_USER=x", "APP_SECRET_DIR=/x", "ADMIN_SECRET_DIR=/x", "SYNC_INTERVAL=soon"}, "SYNC_INTERVAL must be an integer >= 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bash, append([]string{tc.script}, tc.args...)...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("got %v:\n%s\nwant a failure saying %q", err, out, tc.want)
			}
		})
	}
}
