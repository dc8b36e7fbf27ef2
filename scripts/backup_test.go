package scripts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBackupRestore: backup.sh and restore.sh against real servers: round
// trip, refusals, corrupted backups, retention and failing backups.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	src := newCluster(t, tl, root, "orders")
	dst := newCluster(t, tl, root, "orders-v2")
	sp := src.instance(0)
	dp := dst.instance(0)
	sp.start(t)
	sp.waitReady(t, 120*time.Second)

	const rows = 1000 + 100000
	src.appSQL(t, sp, `
		CREATE TABLE customers(id serial PRIMARY KEY, name text NOT NULL, email text UNIQUE);
		CREATE TABLE orders(id bigserial PRIMARY KEY, customer_id int NOT NULL REFERENCES customers,
			amount numeric(10,2) NOT NULL, note text, created timestamptz NOT NULL);
		CREATE INDEX orders_customer ON orders(customer_id);
		CREATE VIEW big_spenders AS SELECT customer_id, sum(amount) AS total FROM orders GROUP BY 1 HAVING sum(amount) > 100000;
		COMMENT ON TABLE orders IS 'Grüße ✓';
		INSERT INTO customers(name, email) SELECT 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 1000) g;
		INSERT INTO orders(customer_id, amount, note, created)
			SELECT 1 + g % 1000, (g % 99991) / 100.0, CASE WHEN g % 7 = 0 THEN NULL ELSE 'note ✓ ' || g END,
				timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute'
			FROM generate_series(1, 100000) g;`)
	srcSums := src.tableChecksums(t, sp, src.db)
	if len(srcSums) != 2 {
		t.Fatalf("source tables: %v", srcSums)
	}

	backups := tl.mkdir(t, filepath.Join(root, "backups"))
	backupEnv := func(dir, db, prefix string, retention int, extra ...string) []string {
		env := append(tl.baseEnv(root),
			"PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(sp.port), "PGUSER="+src.su, "PGPASSWORD="+src.secret(t, "superuser", "password"),
			"DB_NAME="+db, "BACKUP_DIR="+dir, "BACKUP_RETENTION="+strconv.Itoa(retention), "DATABASE="+prefix,
			"BACKUP_WAIT_SECONDS=3") // failing cases give up fast
		return append(env, extra...)
	}
	restoreEnv := func(c *cluster, in *instance, db, backup string, extra ...string) []string {
		env := append(tl.baseEnv(root),
			"PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(in.port), "PGUSER="+c.su, "PGPASSWORD="+c.secret(t, "superuser", "password"),
			"DB_NAME="+db, "APP_USER="+c.app, "RESTORE_DIR="+backups, "RESTORE_BACKUP="+backup, "RESTORE_SOURCE=orders",
			"RESTORE_WAIT_SECONDS=120", "RETRY_INTERVAL=1")
		return append(env, extra...)
	}

	var first string // base name of the first backup
	t.Run("backup", func(t *testing.T) {
		start := time.Now()
		base, out, err := runBackup(src, backupEnv(backups, src.db, "orders", 7))
		if err != nil {
			t.Fatalf("backup: %v\n%s", err, out)
		}
		first = base
		dump := filepath.Join(backups, base+".dump")
		t.Logf("timing: backup of %d rows (%s dump) in %v", rows, mb(fileSize(t, dump)), time.Since(start).Round(time.Millisecond))
		if got, want := listDir(t, backups), []string{base + ".dump", base + ".globals.sql", base + ".sha256"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("backup dir: %v, want %v", got, want)
		}
		if !regexp.MustCompile(`^orders-[0-9]{8}T[0-9]{6}Z$`).MatchString(base) {
			t.Errorf("backup name %q", base)
		}
		checkSums(t, backups, base)
		if strings.Count(out, "step ") < 7 {
			t.Errorf("backup log has no line per step:\n%s", out)
		}
		globals := readFile(t, filepath.Join(backups, base+".globals.sql"))
		if !strings.Contains(globals, "CREATE ROLE orders") || strings.Contains(globals, "SCRAM-SHA-256") {
			t.Errorf("globals: want roles, no password hashes:\n%s", globals)
		}
	})
	if first == "" {
		t.Fatal("no backup")
	}

	t.Run("restore waits for the server, then round trip", func(t *testing.T) {
		dp.start(t) // bootstraps while restore.sh is already waiting
		start := time.Now()
		out, err := dst.script(5*time.Minute, restoreEnv(dst, dp, dst.db, "latest"), Restore)
		if err != nil {
			t.Fatalf("restore: %v\n%s", err, out)
		}
		t.Logf("timing: restore job of %d rows, including its wait for the new server's bootstrap, in %v; the script says: %s; %s",
			rows, time.Since(start).Round(time.Millisecond), grepLine(out, "server reachable after"), grepLine(out, "pg_restore done in"))
		last := lastLine(out)
		if !strings.HasPrefix(last, "restore: SUCCESS: restored backup "+first+" of orders") {
			t.Errorf("final line: %q", last)
		}
		if got := dst.tableChecksums(t, dp, dst.db); fmt.Sprint(got) != fmt.Sprint(srcSums) {
			t.Errorf("restored tables:\n%v\nwant\n%v", got, srcSums)
		}
		for _, tc := range []struct{ name, sql, want string }{
			{"owner", "SELECT string_agg(DISTINCT tableowner, ',') FROM pg_tables WHERE schemaname = 'public'", "orders_v2"},
			{"view", "SELECT count(*) >= 0 FROM big_spenders", "t"},
			{"sequence continues", "INSERT INTO customers(name) VALUES ('new') RETURNING id", "1001"},
			{"comment", "SELECT obj_description('orders'::regclass)", "Grüße ✓"},
		} {
			if got := dst.appSQL(t, dp, tc.sql); got != tc.want {
				t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
			}
		}
		dst.appSQL(t, dp, "DELETE FROM customers WHERE id = 1001")
	})

	t.Run("a second run of the job is a no-op", func(t *testing.T) {
		before := dst.tableChecksums(t, dp, dst.db)
		out, err := dst.script(2*time.Minute, restoreEnv(dst, dp, dst.db, "latest"), Restore)
		if err != nil || !strings.Contains(lastLine(out), "already restored") {
			t.Errorf("rerun: %v\n%s", err, out)
		}
		if got := dst.tableChecksums(t, dp, dst.db); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("rerun changed data")
		}
	})

	t.Run("restore into a database with user tables is refused", func(t *testing.T) {
		out, err := src.script(2*time.Minute, restoreEnv(src, sp, src.db, first), Restore)
		if code := exitCode(err); code != 3 {
			t.Errorf("exit code %d (%v), want 3\n%s", code, err, out)
		}
		if last := lastLine(out); !strings.Contains(last, "REFUSED") || !strings.Contains(last, "already holds 2 user table(s)") {
			t.Errorf("final line: %q", last)
		}
		if got := src.tableChecksums(t, sp, src.db); fmt.Sprint(got) != fmt.Sprint(srcSums) {
			t.Errorf("refused restore changed data")
		}
	})

	t.Run("server not reachable: bounded wait", func(t *testing.T) {
		env := restoreEnv(dst, dp, "scratch", "latest", "PGPORT="+strconv.Itoa(freePort(t)), "RESTORE_WAIT_SECONDS=2")
		start := time.Now()
		out, err := dst.script(time.Minute, env, Restore)
		if code := exitCode(err); code != 2 || !strings.Contains(lastLine(out), "not reachable after 2s") {
			t.Errorf("exit %d (%v):\n%s", code, err, out)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("bounded wait took %v", d)
		}
	})

	// A restore that found no usable backup changed nothing, so the database
	// is still empty and a new run (the function's retry: a corrected
	// spec.restoreFrom.backup or a raised attempt) restores into it.
	t.Run("no usable backup: exit 4, nothing changed; a retry restores", func(t *testing.T) {
		dst.superSQL(t, dp, "postgres", "CREATE DATABASE scratch_retry OWNER "+dst.app)
		out, err := dst.script(time.Minute, restoreEnv(dst, dp, "scratch_retry", "orders-29990101T000000Z.dump"), Restore)
		if code := exitCode(err); code != 4 || !strings.Contains(lastLine(out), "backup orders-29990101T000000Z not found in "+backups) {
			t.Errorf("a backup that is not there: exit %d (%v), want 4:\n%s", code, err, out)
		}
		empty := tl.mkdir(t, filepath.Join(root, "no-backups"))
		out, err = dst.script(time.Minute, restoreEnv(dst, dp, "scratch_retry", "latest", "RESTORE_DIR="+empty), Restore)
		if code := exitCode(err); code != 4 || !strings.Contains(lastLine(out), "no good backup of orders in "+empty) {
			t.Errorf("latest with no backup: exit %d (%v), want 4:\n%s", code, err, out)
		}
		if got := dst.tableChecksums(t, dp, "scratch_retry"); len(got) != 0 {
			t.Fatalf("a failed restore left tables: %v", got)
		}
		out, err = dst.script(3*time.Minute, restoreEnv(dst, dp, "scratch_retry", first), Restore)
		if err != nil || !strings.Contains(lastLine(out), "restored backup "+first) {
			t.Fatalf("the retry: %v\n%s", err, out)
		}
		if got := dst.tableChecksums(t, dp, "scratch_retry"); fmt.Sprint(got) != fmt.Sprint(srcSums) {
			t.Errorf("the retry restored:\n%v\nwant\n%v", got, srcSums)
		}
	})

	t.Run("corrupted backups are never good", func(t *testing.T) {
		for i, tc := range []struct {
			name    string
			corrupt func(dir, base string)
			wantErr string
		}{
			{"truncated dump", func(dir, base string) {
				p := filepath.Join(dir, base+".dump")
				if err := os.Truncate(p, fileSize(t, p)/2); err != nil {
					t.Fatal(err)
				}
			}, "checksum mismatch"},
			{"flipped byte", func(dir, base string) {
				p := filepath.Join(dir, base+".dump")
				b := []byte(readFile(t, p))
				b[len(b)/2] ^= 0xff
				writeFile(t, p, string(b))
			}, "checksum mismatch"},
			{"no checksum file (unfinished)", func(dir, base string) {
				os.Remove(filepath.Join(dir, base+".sha256"))
			}, "is missing"},
			{"checksum file lists the dump only", func(dir, base string) {
				p := filepath.Join(dir, base+".sha256")
				writeFile(t, p, strings.SplitAfter(readFile(t, p), "\n")[0])
			}, "does not list both files"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				// A newer copy of the good backup, then corrupted.
				base := fmt.Sprintf("orders-2999010%dT000000Z", i+1)
				copyBackup(t, backups, first, base)
				tc.corrupt(backups, base)
				defer removeBackup(backups, base)

				// latest skips it (and still refuses a non-empty database).
				out, _ := src.script(2*time.Minute, restoreEnv(src, sp, src.db, "latest"), Restore)
				if !strings.Contains(out, "skipping backup "+base) || !strings.Contains(out, "latest good backup: "+first) || !strings.Contains(out, tc.wantErr) {
					t.Errorf("latest did not skip %s (%s):\n%s", base, tc.wantErr, out)
				}
				// Named explicitly: refused clearly, nothing restored.
				dst.superSQL(t, dp, "postgres", fmt.Sprintf("CREATE DATABASE scratch%d OWNER %s", i, dst.app))
				out, err := dst.script(2*time.Minute, restoreEnv(dst, dp, fmt.Sprintf("scratch%d", i), base+".dump"), Restore)
				if code := exitCode(err); code != 4 || !strings.Contains(lastLine(out), "does not verify") {
					t.Errorf("explicit restore of a bad backup: exit %d (%v), want 4\n%s", code, err, out)
				}
				if got := dst.tableChecksums(t, dp, fmt.Sprintf("scratch%d", i)); len(got) != 0 {
					t.Errorf("bad backup restored tables: %v", got)
				}
			})
		}
		// One real restore through `latest` with a bad newer backup present.
		base := "orders-29990201T000000Z"
		copyBackup(t, backups, first, base)
		if err := os.Truncate(filepath.Join(backups, base+".dump"), 4096); err != nil {
			t.Fatal(err)
		}
		defer removeBackup(backups, base)
		dst.superSQL(t, dp, "postgres", "CREATE DATABASE scratch_latest OWNER "+dst.app)
		out, err := dst.script(3*time.Minute, restoreEnv(dst, dp, "scratch_latest", "latest"), Restore)
		if err != nil || !strings.Contains(lastLine(out), "restored backup "+first) {
			t.Errorf("latest with a bad newer backup: %v\n%s", err, out)
		}
		if got := dst.tableChecksums(t, dp, "scratch_latest"); fmt.Sprint(got) != fmt.Sprint(srcSums) {
			t.Errorf("restored tables differ")
		}
	})
}

// TestBackupRetention: many backups with a small retention, a backup gone
// bad, leftovers of a killed run, and backups that fail.
func TestBackupRetention(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	src := newCluster(t, tl, root, "tiny")
	sp := src.instance(0)
	sp.start(t)
	sp.waitReady(t, 120*time.Second)
	src.appSQL(t, sp, "CREATE TABLE t(id int); INSERT INTO t SELECT generate_series(1, 10)")
	backupEnv := func(dir, db, prefix string, retention int, extra ...string) []string {
		env := append(tl.baseEnv(root),
			"PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(sp.port), "PGUSER="+src.su, "PGPASSWORD="+src.secret(t, "superuser", "password"),
			"DB_NAME="+db, "BACKUP_DIR="+dir, "BACKUP_RETENTION="+strconv.Itoa(retention), "DATABASE="+prefix,
			"BACKUP_WAIT_SECONDS=3") // failing cases give up fast
		return append(env, extra...)
	}

	ret := tl.mkdir(t, filepath.Join(root, "retention"))
	t.Run("retention keeps the newest good backups", func(t *testing.T) {
		var made []string
		start := time.Now()
		for i := 0; i < 10; i++ {
			base, out, err := runBackup(src, backupEnv(ret, "tiny", "tiny", 3))
			if err != nil {
				t.Fatalf("backup %d: %v\n%s", i, err, out)
			}
			made = append(made, base)
		}
		t.Logf("timing: 10 backups of a small database with retention 3 in %v", time.Since(start).Round(time.Millisecond))
		if got, want := backupSets(t, ret), made[7:]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after 10 backups: %v, want %v", got, want)
		}
		// The newest one goes bad: the next run keeps 3 good ones and drops
		// the bad one. A run killed earlier left its temporary directory: the
		// next run removes it.
		if err := os.Truncate(filepath.Join(ret, made[9]+".dump"), 100); err != nil {
			t.Fatal(err)
		}
		partial := tl.mkdir(t, filepath.Join(ret, ".partial-tiny-20000101T000000Z"))
		writeFile(t, filepath.Join(partial, "tiny-20000101T000000Z.dump"), "half a dump")
		base, out, err := runBackup(src, backupEnv(ret, "tiny", "tiny", 3))
		if err != nil {
			t.Fatalf("backup: %v\n%s", err, out)
		}
		if got, want := backupSets(t, ret), []string{made[7], made[8], base}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after a bad one: %v, want %v\n%s", got, want, out)
		}
		for _, b := range backupSets(t, ret) {
			checkSums(t, ret, b)
		}
		if _, err := os.Stat(partial); err == nil || !strings.Contains(out, "leftovers of an interrupted run") {
			t.Errorf("leftovers of a killed run not removed (%v):\n%s", err, out)
		}
	})

	t.Run("failing backups leave the previous set intact", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			env   []string
			setup func()
		}{
			{"database missing", backupEnv(ret, "nope", "tiny", 3), nil},
			{"wrong password", backupEnv(ret, "tiny", "tiny", 3, "PGPASSWORD=wrong"), nil},
			{"retention 0", backupEnv(ret, "tiny", "tiny", 0), nil},
			{"server down", backupEnv(ret, "tiny", "tiny", 1), func() { sp.stop(t) }},
		} {
			if tc.setup != nil {
				tc.setup()
			}
			before := dirState(t, ret)
			_, out, err := runBackup(src, tc.env)
			if err == nil {
				t.Errorf("%s: backup succeeded:\n%s", tc.name, out)
			}
			if after := dirState(t, ret); after != before {
				t.Errorf("%s: backup dir changed:\n%s\nwas\n%s", tc.name, after, before)
			}
			// An unreachable server is waited for, boundedly, and said so.
			if tc.name == "server down" && !strings.Contains(out, "does not answer after 3s") {
				t.Errorf("server down: want the bounded wait reported:\n%s", out)
			}
		}
		for _, b := range backupSets(t, ret) {
			checkSums(t, ret, b)
		}
	})
}

var completedRE = regexp.MustCompile(`backup (\S+) completed`)

// runBackup runs backup.sh; returns the new backup's base name.
func runBackup(c *cluster, env []string) (string, string, error) {
	out, err := c.script(3*time.Minute, env, Backup)
	if err != nil {
		return "", out, err
	}
	m := completedRE.FindStringSubmatch(out)
	if m == nil {
		return "", out, errors.New("no completion line")
	}
	return m[1], out, nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// grepLine: the first line of s containing want, without its timestamp.
func grepLine(s, want string) string {
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, want); i >= 0 {
			return line[i:]
		}
	}
	return "(no " + want + ")"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// listDir: the names in dir, sorted, without dot files.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// dirState: every entry of dir (dot files too, but the lock file) with size
// and modification time.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, e := range entries {
		if e.Name() == ".backup.lock" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sb, "%s %d %s\n", e.Name(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
	}
	return sb.String()
}

// backupSets: the base names of the backups in dir, oldest first; fails the
// test on a file that is not part of a complete set.
func backupSets(t *testing.T, dir string) []string {
	t.Helper()
	count := map[string]int{}
	for _, name := range listDir(t, dir) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, ".dump"), ".globals.sql"), ".sha256")
		count[base]++
	}
	var bases []string
	for base, n := range count {
		if n != 3 {
			t.Errorf("backup %s: %d files, want 3", base, n)
		}
		bases = append(bases, base)
	}
	sort.Strings(bases)
	return bases
}

// checkSums verifies a backup's .sha256 file independently of the scripts.
func checkSums(t *testing.T, dir, base string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, base+".sha256"))), "\n")
	var want []string
	for _, name := range []string{base + ".dump", base + ".globals.sql"} {
		sum := sha256.Sum256([]byte(readFile(t, filepath.Join(dir, name))))
		want = append(want, hex.EncodeToString(sum[:])+"  "+name)
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Errorf("%s.sha256: %q, want %q", base, lines, want)
	}
}

// copyBackup copies backup from as a backup named to (a good one).
func copyBackup(t *testing.T, dir, from, to string) {
	t.Helper()
	for _, ext := range []string{".dump", ".globals.sql"} {
		writeFile(t, filepath.Join(dir, to+ext), readFile(t, filepath.Join(dir, from+ext)))
	}
	writeFile(t, filepath.Join(dir, to+".sha256"), strings.ReplaceAll(readFile(t, filepath.Join(dir, from+".sha256")), from, to))
}

func removeBackup(dir, base string) {
	for _, ext := range []string{".dump", ".globals.sql", ".sha256"} {
		os.Remove(filepath.Join(dir, base+ext))
	}
}
