package scripts

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSettingsReload: a change of a reloadable setting in the function's
// postgresql.conf reaches the running server without a restart: the
// password-sync sidecar sees the mounted file change and reloads the
// configuration (the pods' config hash leaves reloadable settings out, so
// such a change no longer restarts the pods).
func TestSettingsReload(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "reload")
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	const query = "SELECT current_setting('work_mem') || ' ' || pg_postmaster_start_time()"
	before := c.superSQL(t, p, "postgres", query)
	if !strings.HasPrefix(before, "4MB ") {
		t.Fatalf("work_mem before the change: %q, want the default 4MB", before)
	}
	started := strings.TrimPrefix(before, "4MB ")

	// The kubelet swaps the ConfigMap's files in place; the sidecar's round
	// notices and reloads.
	writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), testTier+"work_mem = '7MB'\n")
	if out, err := c.script(time.Minute, append(p.env(), "SYNC_ONCE=1"), SyncPasswords); err != nil {
		t.Fatalf("sync-passwords.sh: %v\n%s", err, out)
	}
	want := "7MB " + started
	var got string
	// pg_reload_conf() signals the postmaster; new sessions see the value
	// once it has re-read the files.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = c.superSQL(t, p, "postgres", query); got == want {
			return
		}
	}
	t.Fatalf("after the settings file changed: %q, want %q (reloaded, same postmaster)", got, want)
}
