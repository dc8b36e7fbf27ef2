package scripts

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPrimary: bootstrap of the primary by entrypoint.sh, password sync by
// sync-passwords.sh, restarts, and the hold of an initialised Database whose
// data directory is gone.
func TestPrimary(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "shop-db")
	p := c.instance(0)

	// A killed initdb left a half data directory; no `initialized` yet: the
	// primary starts over.
	tl.mkdir(t, p.pgdata)
	writeFile(t, filepath.Join(p.pgdata, "PG_VERSION"), "15\n")
	tl.mkdir(t, filepath.Join(p.pgdata, "base"))

	const newAppPassword, newSuPassword = `n3w'app:pa\ss$(x)`, `n3w'super:pa\ss "x"`
	stopWatch := watchArgs(appPassword, suPassword, replPassword, newAppPassword, newSuPassword)
	watching := true
	defer func() {
		if watching {
			stopWatch()
		}
	}()

	start := time.Now()
	p.start(t)
	p.waitReady(t, 120*time.Second)
	t.Logf("primary bootstrap (initdb + roles + database) ready in %v", time.Since(start).Round(time.Millisecond))
	if got := p.lastLog(); !strings.Contains(got, "unfinished bootstrap") {
		t.Errorf("entrypoint log does not say it started over an unfinished bootstrap:\n%s", tail(got, 20))
	}
	if err := p.probe("live"); err != nil {
		t.Errorf("live probe of a running primary: %v", err)
	}

	sync := startSidecar(t, c, p)

	t.Run("bootstrap", func(t *testing.T) {
		for _, tc := range []struct {
			name, db, sql, want string
		}{
			{"data checksums", "postgres", "SHOW data_checksums", "on"},
			{"tier settings included last", "postgres", "SHOW max_connections", "40"},
			{"wal_level", "postgres", "SHOW wal_level", "replica"},
			{"hot_standby", "postgres", "SHOW hot_standby", "on"},
			{"listen (tier override)", "postgres", "SHOW listen_addresses", "127.0.0.1"},
			{"WAL bounds of a 1Gi volume over the entrypoint's defaults", "postgres", "SELECT current_setting('max_wal_size')||','||current_setting('wal_keep_size')||','||current_setting('max_slot_wal_keep_size')", "256MB,64MB,128MB"},
			{"scram passwords", "postgres", "SELECT string_agg(rolname||'='||(rolpassword LIKE 'SCRAM-SHA-256$%')::text, ',' ORDER BY rolname) FROM pg_authid WHERE rolname IN ('postgres','replicator','shop_db')", "postgres=true,replicator=true,shop_db=true"},
			{"replication role", "postgres", "SELECT rolreplication AND NOT rolsuper FROM pg_roles WHERE rolname = 'replicator'", "t"},
			{"app role not superuser", "postgres", "SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles WHERE rolname = 'shop_db'", "f"},
			{"app owns the database", "postgres", "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'shop_db'", "shop_db"},
			{"nothing trust", "postgres", "SELECT count(*) FROM pg_hba_file_rules WHERE auth_method IN ('trust','password','md5') OR error IS NOT NULL", "0"},
			{"remote is scram", "postgres", "SELECT string_agg(DISTINCT auth_method, ',') FROM pg_hba_file_rules WHERE type = 'host'", "scram-sha-256"},
			{"socket only for the superuser", "postgres", "SELECT string_agg(array_to_string(user_name, ',')||':'||auth_method, ';') FROM pg_hba_file_rules WHERE type = 'local'", "postgres:peer"},
		} {
			if got := c.superSQL(t, p, tc.db, tc.sql); got != tc.want {
				t.Errorf("%s: %s = %q, want %q", tc.name, tc.sql, got, tc.want)
			}
		}
		c.appSQL(t, p, "CREATE TABLE notes(id int primary key, body text); INSERT INTO notes VALUES (1, 'kept')")
		for _, tc := range []struct {
			name, user, password, db, wantErr string
		}{
			{"app to another database", c.app, appPassword, "postgres", "no pg_hba.conf entry"},
			{"replication role as a normal login", c.repl, replPassword, c.db, "no pg_hba.conf entry"},
			{"superuser, wrong password", c.su, "wrong", "postgres", "password authentication failed"},
			{"app, wrong password", c.app, "wrong", c.db, "password authentication failed"},
		} {
			_, err := c.psql(p.port, tc.user, tc.password, tc.db, "SELECT 1")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.wantErr)
			}
		}
	})

	t.Run("password sync", func(t *testing.T) {
		waitFor(t, 30*time.Second, "sidecar applied the passwords once", func() error {
			return containsErr(sync.log(), "passwords applied")
		})
		for _, tc := range []struct {
			secret, key, user, db, newPassword string
		}{
			{"app", "password", c.app, c.db, newAppPassword},
			{"superuser", "password", c.su, "postgres", newSuPassword},
		} {
			old := c.secret(t, tc.secret, tc.key)
			c.setSecret(t, tc.secret, tc.key, tc.newPassword)
			took := waitFor(t, 30*time.Second, tc.user+" logs in with the new password", func() error {
				_, err := c.psql(p.port, tc.user, tc.newPassword, tc.db, "SELECT 1")
				return err
			})
			t.Logf("timing: %s password rotated: new one accepted %v after the secret file changed", tc.user, took.Round(time.Millisecond))
			if _, err := c.psql(p.port, tc.user, old, tc.db, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
				t.Errorf("%s: old password: got %v, want refused", tc.user, err)
			}
		}
		if got := c.appSQL(t, p, "SELECT body FROM notes WHERE id = 1"); got != "kept" {
			t.Errorf("data after password change: %q", got)
		}
		watching = false
		if seen := stopWatch(); len(seen) > 0 {
			t.Errorf("passwords in process arguments: %q", seen)
		}
		logs := sync.log() + p.logs()
		for _, pw := range []string{appPassword, suPassword, replPassword, c.secret(t, "app", "password"), c.secret(t, "superuser", "password")} {
			if strings.Contains(logs, pw) {
				t.Errorf("a password appears in the logs")
			}
		}
	})

	t.Run("restart keeps data once initialized", func(t *testing.T) {
		writeFile(t, filepath.Join(c.scripts, "initialized"), "true\n")
		p.stop(t)
		if err := p.probe("live"); err == nil {
			t.Errorf("live probe succeeded with postgres down and nothing held")
		}
		p.start(t)
		p.waitReady(t, 60*time.Second)
		if got := c.appSQL(t, p, "SELECT body FROM notes WHERE id = 1"); got != "kept" {
			t.Errorf("data after restart: %q", got)
		}
		if strings.Contains(p.lastLog(), "initialising") {
			t.Errorf("restart ran initdb:\n%s", tail(p.lastLog(), 20))
		}
	})

	t.Run("a restarted container is live while its entrypoint prepares", func(t *testing.T) {
		// The state file outlives the container (an emptyDir): the last
		// one left "running". Peers that do not answer (PEER_TIMEOUT each)
		// keep the entrypoint in its checks before postgres starts, as a
		// starved node does; the liveness probe must not kill it there.
		p.stop(t)
		stateFile := filepath.Join(p.state, "database-state")
		state := func() string {
			b, _ := os.ReadFile(stateFile)
			return strings.TrimSpace(string(b))
		}
		if got := state(); got != "running" {
			t.Fatalf("state after the stop %q, want the last container's running", got)
		}
		p.start(t, "PEER_TIMEOUT=3", "PEER_HOSTS="+blackhole(t))
		waitFor(t, 10*time.Second, "state starting", func() error {
			if got := state(); got != "starting" {
				return fmt.Errorf("state %q", got)
			}
			return nil
		})
		probed := 0
		for state() == "starting" {
			live, ready := p.probe("live"), p.probe("ready")
			if state() != "starting" {
				break // postgres started meanwhile: not this check's case
			}
			if live != nil {
				t.Fatalf("not live while the entrypoint prepares: %v", live)
			}
			if ready == nil {
				t.Fatal("ready before postgres started")
			}
			probed++
		}
		if probed == 0 {
			t.Error("postgres started before any probe: the peers' checks were too short to test")
		}
		p.waitReady(t, 60*time.Second)
		if err := p.probe("live"); err != nil {
			t.Errorf("live probe once started: %v", err)
		}
	})

	t.Run("empty data directory after initialized holds", func(t *testing.T) {
		p.stop(t)
		if err := os.RemoveAll(p.pgdata); err != nil {
			t.Fatal(err)
		}
		p.start(t)
		waitFor(t, 30*time.Second, "hold", func() error { return containsErr(p.lastLog(), "HOLDING") })
		// Give it time to do something wrong.
		time.Sleep(2 * time.Second)
		if !p.running() {
			t.Fatalf("held pod exited: %v\n%s", p.err, p.lastLog())
		}
		if err := p.probe("ready"); err == nil {
			t.Errorf("ready probe succeeded while holding")
		}
		if err := p.probe("live"); err != nil {
			t.Errorf("live probe failed while holding: %v", err)
		}
		if !dirIsEmpty(p.pgdata) {
			t.Errorf("held primary wrote into its data directory")
		}
		if _, err := os.Stat(filepath.Join(p.state, "database-hold")); err != nil {
			t.Errorf("no hold marker: %v", err)
		}
		for _, want := range []string{"is empty but this Database was initialised before", "refusing to initdb"} {
			if !strings.Contains(p.lastLog(), want) {
				t.Errorf("hold log lacks %q:\n%s", want, p.lastLog())
			}
		}
		p.signal(syscall.SIGTERM)
		if err := p.waitExit(10 * time.Second); err != nil {
			t.Errorf("held pod ignores SIGTERM: %v", err)
		}
	})

	t.Run("other holds", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			setup func(pgdata string)
			want  string
		}{
			{"unfinished bootstrap after initialized", func(pgdata string) {
				writeFile(t, filepath.Join(pgdata, "PG_VERSION"), "15\n")
			}, "has no bootstrap marker"},
			{"other major version", func(pgdata string) {
				writeFile(t, filepath.Join(pgdata, "PG_VERSION"), "9\n")
				writeFile(t, filepath.Join(pgdata, "database.bootstrapped"), "x\n")
			}, "an in-place major upgrade is not supported"},
		} {
			os.RemoveAll(p.pgdata)
			tl.mkdir(t, p.pgdata)
			tc.setup(p.pgdata)
			p.start(t)
			waitFor(t, 30*time.Second, tc.name, func() error { return containsErr(p.lastLog(), "HOLDING") })
			if !strings.Contains(p.lastLog(), tc.want) {
				t.Errorf("%s: log lacks %q:\n%s", tc.name, tc.want, p.lastLog())
			}
			if err := p.probe("ready"); err == nil {
				t.Errorf("%s: ready while holding", tc.name)
			}
			if err := p.probe("live"); err != nil {
				t.Errorf("%s: not live while holding: %v", tc.name, err)
			}
			p.signal(syscall.SIGTERM)
			if err := p.waitExit(10 * time.Second); err != nil {
				t.Error(err)
			}
		}
	})
}

// sidecar is a running sync-passwords.sh.
type sidecar struct {
	path string
}

func (s *sidecar) log() string {
	b, _ := os.ReadFile(s.path)
	return string(b)
}

// startSidecar runs sync-passwords.sh beside the pod until the test ends.
func startSidecar(t *testing.T, c *cluster, in *instance) *sidecar {
	t.Helper()
	s := &sidecar{path: filepath.Join(in.dir, "sync-passwords.log")}
	f, err := os.Create(s.path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.tl.command(t.Context(), in.dir, in.env(), c.tl.bashPath, filepath.Join(c.scripts, SyncPasswords))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		f.Close()
		if t.Failed() {
			t.Logf("--- sync-passwords log ---\n%s", tail(s.log(), 40))
		}
	})
	return s
}

func containsErr(s, want string) error {
	if strings.Contains(s, want) {
		return nil
	}
	return &notFound{want}
}

type notFound struct{ want string }

func (e *notFound) Error() string { return "output lacks " + e.want }

func dirIsEmpty(path string) bool {
	entries, err := os.ReadDir(path)
	return err != nil || len(entries) == 0
}

// TestMonitorRole: with MONITOR_USER and MONITOR_UID (metrics on), the
// primary's sidecar creates the exporter's role (LOGIN, member of
// pg_monitor, nothing more; again harmlessly on every apply), and the
// entrypoint admits it on the socket from that uid alone: the exporter's
// uid reads the statistics as that role, and is refused as the superuser
// (postgres_exporter's /probe takes any DSN).
func TestMonitorRole(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	if !tl.setCred {
		t.Skip("needs root: the exporter's uid is another user's")
	}
	const role, uid = "postgres-exporter", 65534
	root := newRoot(t, tl)
	// The exporter's uid reaches the socket, as in the pod (the run
	// emptyDir is world-writable, the socket 0777).
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, tl, root, "watched")
	p := c.instance(0)
	p.extra = []string{"MONITOR_USER=" + role, "MONITOR_UID=" + strconv.Itoa(uid)}
	p.start(t)
	p.waitReady(t, 120*time.Second)
	sync := startSidecar(t, c, p)
	waitFor(t, 30*time.Second, "sidecar applied the passwords", func() error {
		return containsErr(sync.log(), "passwords applied")
	})
	const q = "SELECT rolcanlogin, rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls, rolpassword IS NULL, pg_has_role(oid, 'pg_monitor', 'MEMBER') FROM pg_authid WHERE rolname = '" + role + "'"
	if got := c.superSQL(t, p, "postgres", q); got != "t|f|t|t" {
		t.Errorf("%s = %q, want t|f|t|t (login, no other privilege, no password, pg_monitor)", q, got)
	}
	if got := c.superSQL(t, p, "postgres", "SELECT string_agg(array_to_string(user_name, ',')||':'||auth_method||':'||coalesce(options[1], ''), ';' ORDER BY line_number) FROM pg_hba_file_rules WHERE type = 'local'"); got != "postgres:peer:map=superuser;"+role+":peer:map=monitor" {
		t.Errorf("socket rules: %q", got)
	}
	c.appSQL(t, p, "CREATE TABLE secrets(v text); INSERT INTO secrets VALUES ('x')")

	asMonitor := func(user, db, sql string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(tl.bin, "psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h", p.sock, "-p", strconv.Itoa(p.port), "-U", user, "-d", db, "-c", sql)
		cmd.Env = tl.baseEnv(root)
		cmd.Dir = root
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, NoSetGroups: true}}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// What the exporter reads: every session's state, the settings, sizes.
	if out, err := asMonitor(role, "postgres", "SELECT current_user, count(*) >= 0, current_setting('data_directory') <> '', pg_database_size('"+c.db+"') > 0 FROM pg_stat_activity"); err != nil || out != role+"|t|t|t" {
		t.Errorf("the exporter's uid as %s: %q, %v", role, out, err)
	}
	for _, tc := range []struct{ user, db, sql, want string }{
		{c.su, "postgres", "SELECT 1", "Peer authentication failed"},
		{c.app, c.db, "SELECT 1", "no pg_hba.conf entry"},
		{role, c.db, "SELECT * FROM secrets", "permission denied"},
	} {
		if out, err := asMonitor(tc.user, tc.db, tc.sql); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("the exporter's uid as %s on %s: %q, %v; want refused (%s)", tc.user, tc.db, out, err, tc.want)
		}
	}
	// Applied again (a restart of the sidecar): the role exists, nothing fails.
	out, err := c.script(60*time.Second, append(p.env(), "SYNC_ONCE=1"), SyncPasswords)
	if err != nil {
		t.Errorf("sync-passwords again with the role present: %v\n%s", err, tail(out, 20))
	}
}
