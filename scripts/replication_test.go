package scripts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReplication: a primary and two streaming hot standbys, all built by
// entrypoint.sh; restarts; killed and half-finished clones.
func TestReplication(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "orders")
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 120*time.Second)

	// Data before the standbys exist (copied by the clone): 10,000 rows and a
	// filler table so that the clone has some size.
	c.appSQL(t, p, `CREATE TABLE items(id int PRIMARY KEY, payload text NOT NULL);
		INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 10000) g;
		CREATE TABLE filler(id int, pad text);
		INSERT INTO filler SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 40000) g;`)

	s1, s2 := c.instance(1), c.instance(2)
	primarySize := dirSize(p.pgdata)
	start := time.Now()
	s1.start(t)
	s2.start(t)
	s1.waitReady(t, 180*time.Second)
	s2.waitReady(t, 180*time.Second)
	t.Logf("timing: two standbys cloned (%s each, primary data dir %s) and ready in %v",
		mb(dirSize(s1.pgdata)), mb(primarySize), time.Since(start).Round(time.Millisecond))
	for _, s := range []*instance{s1, s2} {
		if !strings.Contains(s.lastLog(), "clone completed") {
			t.Errorf("%s: no clone in its log:\n%s", s.pod, tail(s.lastLog(), 20))
		}
	}

	// 10,000 rows written on the primary after the clone must stream.
	start = time.Now()
	c.appSQL(t, p, `INSERT INTO items SELECT g, md5(g::text) FROM generate_series(10001, 20000) g`)
	for _, s := range []*instance{s1, s2} {
		waitFor(t, 60*time.Second, s.pod+" has the primary's 20,000 rows", func() error {
			out, err := c.psql(s.port, c.app, appPassword, c.db, "SELECT count(*) FROM items")
			if err != nil || out != "20000" {
				return fmt.Errorf("%s: %q %w", s.pod, out, err)
			}
			return nil
		})
	}
	t.Logf("timing: 10,000 rows (insert + streaming) visible on both standbys %v after the insert started", time.Since(start).Round(time.Millisecond))
	want := c.tableChecksums(t, p, c.db)
	for _, s := range []*instance{s1, s2} {
		if got := c.tableChecksums(t, s, c.db); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: tables %v, want %v", s.pod, got, want)
		}
	}

	// streaming waits until the given standbys (all when none given) stream
	// from the primary, each through its own physical slot.
	streaming := func(t *testing.T, standbys ...*instance) {
		t.Helper()
		if len(standbys) == 0 {
			standbys = []*instance{s1, s2}
		}
		var pods, want []string
		for _, s := range standbys {
			pods = append(pods, "'"+s.pod+"'")
			want = append(want, s.pod+":streaming:"+strings.ReplaceAll(s.pod, "-", "_")+":physical")
		}
		waitFor(t, 90*time.Second, strings.Join(pods, ",")+" streaming through their slots", func() error {
			got := c.superSQL(t, p, "postgres", `SELECT string_agg(r.application_name||':'||r.state||':'||s.slot_name||':'||s.slot_type, ',' ORDER BY r.application_name)
				FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
				WHERE r.application_name IN (`+strings.Join(pods, ",")+`)`)
			if got != strings.Join(want, ",") {
				return fmt.Errorf("pg_stat_replication: %q, want %q", got, strings.Join(want, ","))
			}
			return nil
		})
	}
	checkStreaming := func(t *testing.T) { streaming(t) }

	t.Run("standbys are read-only hot standbys", func(t *testing.T) {
		for _, s := range []*instance{s1, s2} {
			if got := c.superSQL(t, s, "postgres", "SELECT pg_is_in_recovery()"); got != "t" {
				t.Errorf("%s: pg_is_in_recovery = %q", s.pod, got)
			}
			_, err := c.psql(s.port, c.app, appPassword, c.db, "INSERT INTO items VALUES (0, 'x')")
			if err == nil || !strings.Contains(err.Error(), "read-only transaction") {
				t.Errorf("%s: write on a standby: %v, want read-only error", s.pod, err)
			}
		}
		if got := c.superSQL(t, p, "postgres", "SELECT pg_is_in_recovery()"); got != "f" {
			t.Errorf("primary in recovery: %q", got)
		}
	})

	t.Run("streaming with slots", checkStreaming)

	t.Run("restarted standby is not cloned again", func(t *testing.T) {
		sentinel := filepath.Join(s1.pgdata, "test-sentinel")
		writeFile(t, sentinel, "same data directory\n")
		marker := readFile(t, filepath.Join(s1.pgdata, "database.cloned"))
		sysid := c.superSQL(t, s1, "postgres", "SELECT system_identifier FROM pg_control_system()")
		s1.stop(t)
		c.appSQL(t, p, "INSERT INTO items VALUES (20001, 'while s1 was down')")
		s1.start(t)
		s1.waitReady(t, 60*time.Second)
		log := s1.lastLog()
		if strings.Contains(log, "cloning the primary") || !strings.Contains(log, "not cloning again") {
			t.Errorf("restart log:\n%s", tail(log, 20))
		}
		if got := readFile(t, sentinel); got != "same data directory\n" {
			t.Errorf("sentinel: %q", got)
		}
		if got := readFile(t, filepath.Join(s1.pgdata, "database.cloned")); got != marker {
			t.Errorf("clone marker changed: %q -> %q", marker, got)
		}
		if got := c.superSQL(t, s1, "postgres", "SELECT system_identifier FROM pg_control_system()"); got != sysid {
			t.Errorf("system identifier %s -> %s", sysid, got)
		}
		waitFor(t, 60*time.Second, "row written while s1 was down", func() error {
			out, err := c.psql(s1.port, c.app, appPassword, c.db, "SELECT payload FROM items WHERE id = 20001")
			if err != nil || out != "while s1 was down" {
				return fmt.Errorf("%q %w", out, err)
			}
			return nil
		})
		checkStreaming(t)
	})

	// Two standbys, two ways a clone is interrupted, in parallel.
	t.Run("interrupted clones", func(t *testing.T) {
		t.Run("killed clone is wiped and cloned again", func(t *testing.T) {
			t.Parallel()
			s2.stop(t)
			if err := os.RemoveAll(s2.pgdata); err != nil { // a new volume
				t.Fatal(err)
			}
			// Throttled so that the clone is surely midway when stopped.
			midway := func() {
				t.Helper()
				s2.start(t, "CLONE_MAX_RATE=1M")
				waitFor(t, 60*time.Second, "clone under way", func() error {
					if !strings.Contains(s2.lastLog(), "cloning the primary") {
						return fmt.Errorf("not cloning yet")
					}
					if n := dirSize(s2.pgdata); n < 2<<20 {
						return fmt.Errorf("%d bytes copied", n)
					}
					return nil
				})
				if err := s2.probe("live"); err != nil {
					t.Errorf("live probe while cloning: %v", err)
				}
				if err := s2.probe("ready"); err == nil {
					t.Errorf("ready while cloning")
				}
			}
			// Pod deleted: the kubelet sends SIGTERM to the container's main
			// process only; it must stop the clone and exit at once.
			midway()
			s2.terminate()
			if err := s2.waitExit(15 * time.Second); err != nil {
				t.Errorf("SIGTERM during the clone: %v", err)
			}
			waitFor(t, 15*time.Second, "pg_basebackup gone with its container", func() error {
				if left := s2.groupLeft(); len(left) > 0 {
					return fmt.Errorf("processes left in the group: %q", left)
				}
				return nil
			})
			// Container killed (node crash, OOM): SIGKILL to everything.
			midway()
			s2.kill()
			if _, err := os.Stat(filepath.Join(s2.pgdata, "database.cloned")); err == nil {
				t.Fatal("clone finished before it could be killed")
			}
			half := dirSize(s2.pgdata)
			start := time.Now()
			s2.start(t)
			s2.waitReady(t, 120*time.Second)
			t.Logf("timing: killed clone (%s copied) wiped and cloned again (%s) in %v", mb(half), mb(dirSize(s2.pgdata)), time.Since(start).Round(time.Millisecond))
			if log := s2.lastLog(); !strings.Contains(log, "unfinished clone") || !strings.Contains(log, "clone completed") {
				t.Errorf("re-clone log:\n%s", tail(log, 30))
			}
			streaming(t, s2)
		})

		t.Run("clone without completion marker is redone", func(t *testing.T) {
			t.Parallel()
			s1.stop(t)
			// Looks like a data directory, but the marker was never written.
			if err := os.Remove(filepath.Join(s1.pgdata, "database.cloned")); err != nil {
				t.Fatal(err)
			}
			sentinel := filepath.Join(s1.pgdata, "test-sentinel")
			c.appSQL(t, p, "INSERT INTO items VALUES (20002, 'after the half clone')")
			s1.start(t)
			s1.waitReady(t, 120*time.Second)
			if log := s1.lastLog(); !strings.Contains(log, "unfinished clone") || !strings.Contains(log, "clone completed") {
				t.Errorf("re-clone log:\n%s", tail(log, 30))
			}
			if _, err := os.Stat(sentinel); err == nil {
				t.Errorf("half-finished data directory was not wiped")
			}
			streaming(t, s1)
		})
	})
	checkStreaming(t)

	t.Run("replication password rotation", func(t *testing.T) {
		newPW := `n3w:repl'\pw`
		c.setSecret(t, "superuser", "replication-password", newPW)
		// One round of each pod's sidecar: the primary alters the role, the
		// standbys refresh the passfile of their walreceiver.
		for _, in := range []*instance{p, s1, s2} {
			out, err := c.script(time.Minute, append(in.env(), "SYNC_ONCE=1"), SyncPasswords)
			if err != nil {
				t.Fatalf("%s: sync-passwords: %v\n%s", in.pod, err, out)
			}
		}
		if got, want := readFile(t, filepath.Join(s1.dir, "data", "replication.pgpass")), `*:*:*:replicator:n3w\:repl'\\pw`+"\n"; got != want {
			t.Errorf("passfile %q, want %q", got, want)
		}
		replConn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s replication=true", p.port, c.repl)
		if _, err := c.psqlConn(replConn, replPassword, "IDENTIFY_SYSTEM"); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
			t.Errorf("old replication password: %v, want refused", err)
		}
		if _, err := c.psqlConn(replConn, newPW, "IDENTIFY_SYSTEM"); err != nil {
			t.Errorf("new replication password: %v", err)
		}
		// Walreceivers reconnect with the new password.
		c.superSQL(t, p, "postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_replication")
		checkStreaming(t)
	})

	t.Run("standby that lost its WAL is cloned again", func(t *testing.T) {
		slot := strings.ReplaceAll(s2.pod, "-", "_")
		marker := filepath.Join(s2.pgdata, "database.cloned")

		// Safety first: with the primary down, a standby does not stream
		// either, yet nothing may be marked: it may hold the only copy.
		p.stop(t)
		waitFor(t, 30*time.Second, s2.pod+" not streaming", func() error {
			if got := c.superSQL(t, s2, "postgres", "SELECT coalesce((SELECT status FROM pg_stat_wal_receiver), 'none')"); got == "streaming" {
				return errors.New("still streaming")
			}
			return nil
		})
		out, err := c.script(time.Minute, append(s2.env(), "SYNC_ONCE=1"), SyncPasswords)
		if _, statErr := os.Stat(marker); statErr != nil || strings.Contains(out, "invalidated") {
			t.Fatalf("primary down: the sidecar touched the clone (%v, %v):\n%s", statErr, err, out)
		}
		p.start(t)
		p.waitReady(t, 60*time.Second)
		checkStreaming(t) // s1 must not lose its slot below

		s2.stop(t)
		// More WAL than max_slot_wal_keep_size (128MB in testTier) while s2
		// is down: the primary invalidates its slot at a checkpoint.
		c.writeUntilSlotLost(t, p, slot)
		s2.start(t)
		// It starts, stale: it cannot stream, so it is never ready.
		waitFor(t, 60*time.Second, s2.pod+" accepting connections", func() error {
			_, err := c.psql(s2.port, c.su, suPassword, "postgres", "SELECT 1")
			return err
		})
		if err := s2.probe("ready"); err == nil {
			t.Errorf("probe ready: a standby that cannot stream is ready")
		}

		// The streaming standby's sidecar changes nothing.
		if out, err := c.script(time.Minute, append(s1.env(), "SYNC_ONCE=1"), SyncPasswords); err != nil || strings.Contains(out, "invalidated") {
			t.Errorf("%s sidecar: %v\n%s", s1.pod, err, out)
		}
		if _, err := os.Stat(filepath.Join(s1.pgdata, "database.cloned")); err != nil {
			t.Errorf("%s: clone marker: %v", s1.pod, err)
		}
		// The stale one's sidecar asks the primary, and marks the clone.
		out, err = c.script(time.Minute, append(s2.env(), "SYNC_ONCE=1"), SyncPasswords)
		if err != nil || !strings.Contains(out, "invalidated slot "+slot) {
			t.Fatalf("%s sidecar: %v\n%s", s2.pod, err, out)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Errorf("clone marker still there: %v", err)
		}
		if err := s2.probe("live"); err == nil || !strings.Contains(err.Error(), "cannot replicate any more") {
			t.Fatalf("probe live: %v, want a failure that restarts the container", err)
		}

		// The kubelet restarts the container: it clones again and streams.
		s2.stop(t)
		s2.start(t)
		s2.waitReady(t, 180*time.Second)
		if log := s2.lastLog(); !strings.Contains(log, "cannot replicate from the primary any more") || !strings.Contains(log, "clone completed") {
			t.Errorf("re-clone log:\n%s", tail(log, 30))
		}
		if err := s2.probe("live"); err != nil {
			t.Errorf("probe live after the clone: %v", err)
		}
		streaming(t, s2)
	})

	// Everything converges again.
	want = c.tableChecksums(t, p, c.db)
	for _, s := range []*instance{s1, s2} {
		waitFor(t, 60*time.Second, s.pod+" converged", func() error {
			if got := c.tableChecksums(t, s, c.db); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s: %v, want %v", s.pod, got, want)
			}
			return nil
		})
	}
	if got := c.superSQL(t, p, "postgres", "SELECT count(*) FROM pg_replication_slots"); got != "2" {
		t.Errorf("slots on the primary: %s, want 2", got)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeUntilSlotLost writes to table filler on the primary p (switching
// segments and checkpointing) until p has invalidated the replication slot:
// more WAL than max_slot_wal_keep_size (128MB in testTier) while its
// standby is away.
func (c *cluster) writeUntilSlotLost(t *testing.T, p *instance, slot string) {
	t.Helper()
	start := time.Now()
	waitFor(t, 4*time.Minute, "slot "+slot+" lost on "+p.pod, func() error {
		c.appSQL(t, p, `INSERT INTO filler SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 200000) g`)
		c.superSQL(t, p, "postgres", "SELECT pg_switch_wal()")
		c.superSQL(t, p, "postgres", "CHECKPOINT")
		if got := c.superSQL(t, p, "postgres", "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '"+slot+"'"); got != "lost" {
			return fmt.Errorf("wal_status %q", got)
		}
		return nil
	})
	t.Logf("timing: slot lost after %v of writes", time.Since(start).Round(time.Millisecond))
}
