package scripts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// standbyFloorSettings are the settings a hot standby must hold at least as
// high as its primary, in two tiers: large (higher) and small (lower).
var standbyFloorSettings = []struct{ name, large, small string }{
	{"max_connections", "40", "20"},
	{"max_worker_processes", "10", "8"},
	{"max_wal_senders", "12", "10"},
	{"max_prepared_transactions", "10", "0"},
	{"max_locks_per_transaction", "128", "64"},
}

// tierWith is testTier with the standby-floor settings of one size.
func tierWith(large bool) string {
	var sb strings.Builder
	for _, line := range strings.Split(testTier, "\n") {
		if !strings.HasPrefix(line, "max_connections") {
			sb.WriteString(line + "\n")
		}
	}
	for _, s := range standbyFloorSettings {
		v := s.small
		if large {
			v = s.large
		}
		fmt.Fprintf(&sb, "%s = %s\n", s.name, v)
	}
	return strings.TrimRight(sb.String(), "\n") + "\n"
}

// settings reads the standby-floor settings of a running server.
func (c *cluster) floorSettings(t *testing.T, in *instance) string {
	t.Helper()
	var parts []string
	for _, s := range standbyFloorSettings {
		parts = append(parts, "current_setting('"+s.name+"')")
	}
	return c.superSQL(t, in, "postgres", "SELECT concat_ws(',', "+strings.Join(parts, ", ")+")")
}

func floorValues(large bool) string {
	var vals []string
	for _, s := range standbyFloorSettings {
		if large {
			vals = append(vals, s.large)
		} else {
			vals = append(vals, s.small)
		}
	}
	return strings.Join(vals, ",")
}

// waitReplayed waits until the standby has replayed everything the primary
// wrote so far.
func (c *cluster) waitReplayed(t *testing.T, p, s *instance) {
	t.Helper()
	lsn := c.superSQL(t, p, "postgres", "SELECT pg_current_wal_lsn()")
	waitFor(t, 60*time.Second, s.pod+" replayed "+lsn, func() error {
		got, err := c.psql(s.port, c.su, c.secret(t, "superuser", "password"), "postgres",
			"SELECT pg_last_wal_replay_lsn() >= '"+lsn+"'::pg_lsn")
		if err != nil || got != "t" {
			return fmt.Errorf("%q %w", got, err)
		}
		return nil
	})
}

// insertAndWait inserts row n (table t holds 1..n-1) on the primary and waits
// until the standby has it.
func (c *cluster) insertAndWait(t *testing.T, p, s *instance, appPassword string, n int) {
	t.Helper()
	c.appSQL(t, p, fmt.Sprintf("INSERT INTO t VALUES (%d)", n))
	waitFor(t, 60*time.Second, s.pod+" streams the new row", func() error {
		got, err := c.psql(s.port, c.app, appPassword, c.db, "SELECT count(*) FROM t")
		if err != nil || got != fmt.Sprint(n) {
			return fmt.Errorf("%q %w", got, err)
		}
		return nil
	})
}

// TestStandbySettingsChange (issue 12 item 1): a size or settings change that
// lowers or raises a setting standbys must match ends with every standby
// streaming, in the StatefulSet's order (highest ordinal first), with no
// manual step.
func TestStandbySettingsChange(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "sized")
	writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), tierWith(true))
	p, s := c.instance(0), c.instance(1)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	c.appSQL(t, p, "CREATE TABLE t(id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	s.start(t)
	s.waitReady(t, 120*time.Second)
	if got := c.floorSettings(t, s); got != floorValues(true) {
		t.Fatalf("standby settings %s, want %s", got, floorValues(true))
	}

	rows := 1
	insertAndCheck := func(t *testing.T) {
		t.Helper()
		rows++
		c.insertAndWait(t, p, s, appPassword, rows)
	}

	t.Run("lowered: standby restarted first", func(t *testing.T) {
		writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), tierWith(false))
		// The roll: the standby restarts first, with the lower values, while
		// the primary still runs with the higher ones.
		s.stop(t)
		s.start(t)
		s.waitReady(t, 60*time.Second)
		if got := c.floorSettings(t, s); got != floorValues(true) {
			t.Errorf("standby before the primary's restart: %s, want the primary's %s", got, floorValues(true))
		}
		if !strings.Contains(s.lastLog(), "starting with max_connections = 40 (configured 20)") {
			t.Errorf("standby log does not say why:\n%s", tail(s.lastLog(), 20))
		}
		insertAndCheck(t)
		// Then the primary.
		p.stop(t)
		p.start(t)
		p.waitReady(t, 60*time.Second)
		if got := c.floorSettings(t, p); got != floorValues(false) {
			t.Fatalf("primary: %s, want %s", got, floorValues(false))
		}
		insertAndCheck(t)
		// The next start of the standby takes the lower values.
		c.waitReplayed(t, p, s)
		s.stop(t)
		s.start(t)
		s.waitReady(t, 60*time.Second)
		if got := c.floorSettings(t, s); got != floorValues(false) {
			t.Errorf("standby after the primary's restart: %s, want %s", got, floorValues(false))
		}
		insertAndCheck(t)
	})

	// roll restarts the standby, then the primary, as the StatefulSet does.
	roll := func(t *testing.T, large bool) {
		t.Helper()
		writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), tierWith(large))
		s.stop(t)
		s.start(t)
		s.waitReady(t, 60*time.Second)
		p.stop(t)
		p.start(t)
		p.waitReady(t, 60*time.Second)
		insertAndCheck(t)
	}

	t.Run("raised in the roll's order, then lowered and reverted before the primary restarted", func(t *testing.T) {
		roll(t, true)
		if got := c.floorSettings(t, s); got != floorValues(true) {
			t.Errorf("standby: %s, want %s", got, floorValues(true))
		}
		writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), tierWith(false))
		s.stop(t)
		s.start(t)
		s.waitReady(t, 60*time.Second)
		writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), tierWith(true))
		s.stop(t)
		s.start(t)
		s.waitReady(t, 60*time.Second)
		insertAndCheck(t)
	})

	t.Run("raised on the primary while the standby runs", func(t *testing.T) {
		// The standby runs with the lower values (restarted after the
		// primary's lower values were replayed).
		roll(t, false)
		c.waitReplayed(t, p, s)
		s.stop(t)
		s.extra = []string{"READY_GRACE_SECONDS=2"}
		s.start(t)
		s.waitReady(t, 60*time.Second)
		if got := c.floorSettings(t, s); got != floorValues(false) {
			t.Fatalf("standby: %s, want %s", got, floorValues(false))
		}
		// Only the primary restarts with higher values (e.g. a roll stopped
		// midway): PostgreSQL 15 pauses the standby's replay.
		writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), tierWith(true))
		p.stop(t)
		p.start(t)
		p.waitReady(t, 60*time.Second)
		waitFor(t, 60*time.Second, s.pod+" not live (replay paused on insufficient settings)", func() error {
			// Both probes, as the kubelet runs them: the liveness probe
			// asks why replay paused once the readiness probe saw it
			// paused.
			_ = s.probe("ready")
			err := s.probe("live")
			if err == nil {
				return errors.New("live")
			}
			if !strings.Contains(err.Error(), "replay paused") {
				return err
			}
			return nil
		})
		waitFor(t, 30*time.Second, s.pod+" not ready", func() error {
			if s.probe("ready") == nil {
				return errors.New("ready")
			}
			return nil
		})
		// The kubelet restarts the container.
		s.stop(t)
		s.start(t)
		s.waitReady(t, 60*time.Second)
		if got := c.floorSettings(t, s); got != floorValues(true) {
			t.Errorf("standby after its restart: %s, want %s", got, floorValues(true))
		}
		if err := s.probe("live"); err != nil {
			t.Errorf("live: %v", err)
		}
		insertAndCheck(t)
	})
	if _, err := os.Stat(filepath.Join(p.pgdata, "database.standby.conf")); err == nil {
		t.Errorf("the primary has a standby floor file")
	}
}

// TestStandbyCannotReplicate (issue 12 item 2): a standby that cannot
// replicate is not ready (the read Service drops it), and is cloned again
// when the primary answers that its slot is gone or that it is another
// cluster.
func TestStandbyCannotReplicate(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "stale")
	p, s := c.instance(0), c.instance(1)
	// The grace has to outlast stopping the primary and one probe: 3 s did
	// not under -race beside the e2e suite (hack/test.sh runs them
	// together), where the probe right after the stop found the standby
	// silent "for more than 3s". Each wait for not-ready costs the grace.
	s.extra = []string{"READY_GRACE_SECONDS=10"}
	p.start(t)
	p.waitReady(t, 120*time.Second)
	c.appSQL(t, p, "CREATE TABLE t(id int PRIMARY KEY); INSERT INTO t VALUES (1)")
	s.start(t)
	s.waitReady(t, 120*time.Second)
	slot := strings.ReplaceAll(s.pod, "-", "_")
	rows := 1
	insertAndCheck := func(t *testing.T) {
		t.Helper()
		rows++
		c.insertAndWait(t, p, s, appPassword, rows)
	}
	notReady := func(t *testing.T, why string) {
		t.Helper()
		waitFor(t, 60*time.Second, s.pod+" not ready ("+why+")", func() error {
			if s.probe("ready") == nil {
				return errors.New("still ready")
			}
			return nil
		})
	}
	sidecar := func(t *testing.T) string {
		t.Helper()
		out, err := c.script(time.Minute, append(s.env(), "SYNC_ONCE=1"), SyncPasswords)
		if err != nil {
			t.Fatalf("sidecar: %v\n%s", err, out)
		}
		return out
	}
	// recloned: the sidecar's mark makes the liveness probe fail; the
	// restarted container clones again and streams.
	recloned := func(t *testing.T, want string) {
		t.Helper()
		if out := sidecar(t); !strings.Contains(out, want) {
			t.Fatalf("sidecar does not mark the clone (%q):\n%s", want, out)
		}
		if _, err := os.Stat(filepath.Join(s.pgdata, "database.cloned")); !os.IsNotExist(err) {
			t.Errorf("clone marker still there: %v", err)
		}
		if err := s.probe("live"); err == nil || !strings.Contains(err.Error(), "cannot replicate any more") {
			t.Fatalf("probe live: %v, want a failure that restarts the container", err)
		}
		s.stop(t)
		s.start(t)
		s.waitReady(t, 120*time.Second)
		if log := s.lastLog(); !strings.Contains(log, "cannot replicate from the primary any more") || !strings.Contains(log, "clone completed") {
			t.Errorf("re-clone log:\n%s", tail(log, 30))
		}
		insertAndCheck(t)
	}

	t.Run("primary briefly down: ready within the grace, not after", func(t *testing.T) {
		insertAndCheck(t)
		p.stop(t)
		if err := s.probe("ready"); err != nil {
			t.Errorf("standby unready at once when the primary stops: %v", err)
		}
		notReady(t, "primary down past the grace")
		if out := sidecar(t); strings.Contains(out, "marking") {
			t.Errorf("silent primary: the sidecar marked the clone:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join(s.pgdata, "database.cloned")); err != nil {
			t.Errorf("silent primary: clone marker: %v", err)
		}
		p.start(t)
		p.waitReady(t, 60*time.Second)
		s.waitReady(t, 60*time.Second)
		insertAndCheck(t)
	})

	t.Run("replay paused: not ready", func(t *testing.T) {
		c.superSQL(t, s, "postgres", "SELECT pg_wal_replay_pause()")
		notReady(t, "replay paused")
		c.superSQL(t, s, "postgres", "SELECT pg_wal_replay_resume()")
		s.waitReady(t, 30*time.Second)
	})

	t.Run("slot dropped on the primary", func(t *testing.T) {
		waitFor(t, 60*time.Second, "slot "+slot+" dropped", func() error {
			_, err := c.psql(p.port, c.su, suPassword, "postgres", `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '`+slot+`' AND active_pid IS NOT NULL;
				SELECT pg_drop_replication_slot('`+slot+`')`)
			return err
		})
		notReady(t, "no slot")
		c.appSQL(t, p, "INSERT INTO t VALUES (1000)") // the stale reads it must not serve
		rows++
		recloned(t, "the primary has no replication slot "+slot)
	})

	t.Run("primary re-created: another system identifier", func(t *testing.T) {
		old := c.superSQL(t, s, "postgres", "SELECT system_identifier FROM pg_control_system()")
		s.stop(t)
		p.stop(t)
		if err := os.RemoveAll(p.pgdata); err != nil { // a new volume
			t.Fatal(err)
		}
		p.start(t)
		p.waitReady(t, 120*time.Second)
		c.appSQL(t, p, "CREATE TABLE t(id int PRIMARY KEY)")
		rows = 0
		s.start(t)
		waitFor(t, 60*time.Second, s.pod+" accepting connections", func() error {
			_, err := c.psql(s.port, c.su, suPassword, "postgres", "SELECT 1")
			return err
		})
		if err := s.probe("ready"); err == nil {
			t.Errorf("a standby of another cluster is ready")
		}
		recloned(t, "the primary is another cluster")
		if got := c.superSQL(t, s, "postgres", "SELECT system_identifier FROM pg_control_system()"); got == old || got != c.superSQL(t, p, "postgres", "SELECT system_identifier FROM pg_control_system()") {
			t.Errorf("system identifier %s after the re-clone (old %s)", got, old)
		}
	})
}

// TestPrimaryRefusesInitdbWhilePeerAnswers (issue 12 item 7): with the
// `initialized` key gone (its ConfigMap deleted) and ordinal 0 on an empty
// volume, the primary does not initdb while a standby's postgres answers:
// it holds. With no standby answering (a new Database), it bootstraps.
func TestPrimaryRefusesInitdbWhilePeerAnswers(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "guard")
	p, s := c.instance(0), c.instance(1)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	c.appSQL(t, p, "CREATE TABLE t(id int); INSERT INTO t VALUES (1)")
	s.start(t)
	s.waitReady(t, 120*time.Second)
	p.extra = []string{fmt.Sprintf("PEER_HOSTS=127.0.0.1:%d 127.0.0.1:%d", freePort(t), s.port)}

	p.stop(t)
	if err := os.RemoveAll(p.pgdata); err != nil { // a new, empty volume
		t.Fatal(err)
	}
	p.start(t)
	waitFor(t, 30*time.Second, "hold", func() error { return containsErr(p.lastLog(), "HOLDING") })
	if !strings.Contains(p.lastLog(), fmt.Sprintf("standby postgres at 127.0.0.1:%d answers", s.port)) {
		t.Errorf("hold log does not name the peer:\n%s", tail(p.lastLog(), 10))
	}
	time.Sleep(time.Second)
	if !p.running() || !dirIsEmpty(p.pgdata) {
		t.Fatalf("held primary exited or wrote its data directory:\n%s", p.lastLog())
	}
	if err := p.probe("ready"); err == nil {
		t.Errorf("ready while holding")
	}
	if got := c.superSQL(t, s, c.db, "SELECT count(*) FROM t"); got != "1" {
		t.Errorf("standby data: %q", got)
	}
	p.signal(syscall.SIGTERM)
	if err := p.waitExit(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// No peer answers: a first bootstrap goes ahead.
	s.stop(t)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	if !strings.Contains(p.lastLog(), "primary bootstrapped") {
		t.Errorf("no bootstrap:\n%s", tail(p.lastLog(), 10))
	}
}
