package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBackupFullVolume (issue 12 item 3): a backup volume filled by
// BACKUP_RETENTION backups does not stop backups for good: a run makes room
// before its dump (down to retention - 1 good backups, never fewer than
// one), a lowered retention applies before the dump, and a dump that still
// does not fit fails cleanly, saying so. The volume is a 20 MiB tmpfs (needs
// root, as in CI).
func TestBackupFullVolume(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "full")
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	// About 5 MiB of dump: hex text compresses to about half.
	c.appSQL(t, p, `CREATE TABLE blob(id int, data text);
		INSERT INTO blob SELECT g, (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 20) i)
		FROM generate_series(1, 16000) g`)

	dir := filepath.Join(root, "backups")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=20m,mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	tl.chown(t, dir)
	env := func(retention int) []string {
		return append(tl.baseEnv(root),
			"PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(p.port), "PGUSER="+c.su, "PGPASSWORD="+suPassword,
			"DB_NAME="+c.db, "BACKUP_DIR="+dir, "BACKUP_RETENTION="+strconv.Itoa(retention), "DATABASE=full")
	}
	backup := func(t *testing.T, retention int) (string, string) {
		t.Helper()
		base, out, err := runBackup(c, env(retention))
		if err != nil {
			t.Fatalf("backup (retention %d): %v\n%s", retention, err, out)
		}
		return base, out
	}

	var made []string
	for i := 0; i < 3; i++ {
		base, _ := backup(t, 3)
		made = append(made, base)
	}
	t.Logf("three backups of %s each fill the volume", mb(fileSize(t, filepath.Join(dir, made[0]+".dump"))))

	t.Run("full at retention: room is made before the dump", func(t *testing.T) {
		base, out := backup(t, 3)
		if !strings.Contains(out, "removed the oldest good backup "+made[0]+" to make room") {
			t.Errorf("the log does not say room was made:\n%s", out)
		}
		if got, want := backupSets(t, dir), []string{made[1], made[2], base}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("backups %v, want %v", got, want)
		}
		made = append(made[1:], base)
	})

	t.Run("lowered retention applies before the dump", func(t *testing.T) {
		base, out := backup(t, 1)
		if !strings.Contains(out, "beyond the retention of 1") {
			t.Errorf("the log does not say the retention was applied first:\n%s", out)
		}
		if got, want := backupSets(t, dir), []string{base}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("backups %v, want %v", got, want)
		}
		made = []string{base}
	})

	t.Run("a dump that cannot fit fails cleanly and keeps one good backup", func(t *testing.T) {
		// Three times the data: the dump no longer fits beside the one kept.
		c.appSQL(t, p, `INSERT INTO blob SELECT g, (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 20) i)
			FROM generate_series(16001, 48000) g`)
		_, out, err := runBackup(c, env(1))
		if err == nil {
			t.Fatalf("a backup larger than the volume succeeded:\n%s", out)
		}
		if !strings.Contains(out, "bytes free in "+dir) || !strings.Contains(out, "full volume") {
			t.Errorf("the failure does not say the volume is full:\n%s", out)
		}
		if got := backupSets(t, dir); fmt.Sprint(got) != fmt.Sprint(made) {
			t.Errorf("backups %v, want the last good one %v", got, made)
		}
		checkSums(t, dir, made[0])
		if left, _ := filepath.Glob(filepath.Join(dir, ".partial-*")); len(left) != 0 || len(listDir(t, dir)) != 3 {
			t.Errorf("the failed run left files: %v %v", left, listDir(t, dir))
		}
	})
}
