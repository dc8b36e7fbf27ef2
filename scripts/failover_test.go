package scripts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The failover Job (failover.sh) and the rejoin of a former primary
// (entrypoint.sh) against real PostgreSQL servers on loopback ports:
// instance k of a cluster is 127.0.0.1:<its port>, and FAILOVER_HOSTS
// replaces the headless Service's names N-k.PEER_DOMAIN.

// failoverRun is one run of failover.sh.
type failoverRun struct {
	out     string         // stdout and stderr
	code    int            // exit code
	message string         // the termination log, as written ("" if absent)
	result  map[string]any // message decoded (nil if absent)
	took    time.Duration
}

// runFailover runs failover.sh as the Job would, for the lost primary
// ordinal from, with hosts[k] the port of ordinal k and grace seconds.
func (c *cluster) runFailover(t *testing.T, hosts []int, from, grace int, extra ...string) failoverRun {
	t.Helper()
	dir, err := os.MkdirTemp(c.root, "failover-")
	if err != nil {
		t.Fatal(err)
	}
	c.tl.chown(t, dir)
	var addrs []string
	for _, port := range hosts {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	termLog := filepath.Join(dir, "termination-log")
	env := append(c.tl.baseEnv(dir),
		"DATABASE="+c.name,
		"PRIMARY_ORDINAL="+strconv.Itoa(from),
		"INSTANCES="+strconv.Itoa(len(hosts)),
		"PGPORT=5432", // required; FAILOVER_HOSTS carries the ports
		"ADMIN_SECRET_DIR="+c.adminSec,
		"GRACE_SECONDS="+strconv.Itoa(grace),
		"STARTING_MAX_SECONDS=10",
		"STATE_DIR="+dir,
		"TERMINATION_LOG="+termLog,
		"FAILOVER_HOSTS="+strings.Join(addrs, " "),
	)
	env = append(env, extra...)
	start := time.Now()
	// A bound for a hang: the script's own rounds and timeouts end it.
	out, err := c.script(5*time.Minute, env, Failover)
	r := failoverRun{out: out, code: exitCode(err), took: time.Since(start)}
	if b, err := os.ReadFile(termLog); err == nil {
		r.message = string(b)
		if err := json.Unmarshal(b, &r.result); err != nil {
			t.Errorf("termination message %q is not JSON: %v", b, err)
		}
		// The function reads it as a FailoverOutcome: no key it lacks.
		if _, err := DecodeReport[FailoverOutcome](b); err != nil {
			t.Errorf("termination message %q is no FailoverOutcome: %v", b, err)
		}
		if strings.Count(r.message, "\n") != 1 || !strings.HasSuffix(r.message, "\n") {
			t.Errorf("termination message %q is not one line", r.message)
		}
	}
	t.Logf("timing: failover.sh (grace %ds) exit %d after %v: %s", grace, r.code, r.took.Round(time.Millisecond), strings.TrimSpace(r.message))
	return r
}

var lsnRE = regexp.MustCompile(`^[0-9A-F]+/[0-9A-F]+$`)

// outcome is the decoded message with the fields that vary (lsn, reason)
// checked by shape and left out, so that the rest compares with cmp.Diff.
func (r failoverRun) outcome(t *testing.T) map[string]any {
	t.Helper()
	if r.code != 0 || r.result == nil {
		t.Fatalf("failover.sh: exit %d, termination message %q, want exit 0 and a message; output:\n%s", r.code, r.message, tail(r.out, 40))
	}
	got := map[string]any{}
	for k, v := range r.result {
		got[k] = v
	}
	switch got["result"] {
	case "promoted":
		if lsn, _ := got["lsn"].(string); !lsnRE.MatchString(lsn) {
			t.Errorf("lsn %q is not an LSN", got["lsn"])
		}
		delete(got, "lsn")
	case "found":
		if lsn, _ := got["lsn"].(string); !lsnRE.MatchString(lsn) {
			t.Errorf("lsn %q is not an LSN", got["lsn"])
		}
		if reason, _ := got["reason"].(string); !strings.Contains(reason, "as a standby") {
			t.Errorf("reason %q", got["reason"])
		}
		delete(got, "lsn")
		delete(got, "reason")
	case "not-needed":
		if reason, _ := got["reason"].(string); !strings.Contains(reason, "answered again") {
			t.Errorf("reason %q", got["reason"])
		}
		delete(got, "reason")
	}
	return got
}

// inRecovery: pg_is_in_recovery() of an instance ("t" or "f").
func (c *cluster) inRecovery(t *testing.T, in *instance) string {
	t.Helper()
	return c.superSQL(t, in, "postgres", "SELECT pg_is_in_recovery()")
}

// waitAccepting waits until postgres on the instance accepts the superuser
// (a standby whose primary is down never becomes ready: it does not stream).
func (c *cluster) waitAccepting(t *testing.T, in *instance) {
	t.Helper()
	waitFor(t, 60*time.Second, in.pod+" accepting connections", func() error {
		_, err := c.psql(in.port, c.su, suPassword, "postgres", "SELECT 1")
		return err
	})
}

// dirFingerprint: relative path → size and sha256 of every file under dir
// (directories as "dir"), to prove a data directory was left untouched.
func dirFingerprint(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = fmt.Sprintf("%d %s", len(b), hex.EncodeToString(sum[:]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFailover: a primary (ordinal 0) and two standbys. The Job ends
// not-needed while the primary answers; with the primary lost it promotes
// the standby with the most WAL, even when that is not the lowest ordinal;
// a second run reports that promotion again; the former primary, named the
// primary by a stale ConfigMap, waits, and running, is fenced by its probe;
// named a standby, it keeps its data until the promoted standby answers at
// PRIMARY_HOST, then clones it. One cluster for the whole story: each step
// starts from the state the previous one left, as in a real failover.
func TestFailover(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "fo-db")
	// other: another Database's primary, on timeline 1 like fo-db's old
	// primary (same passwords, so remote_query logs in): a primary that is
	// not newer must not make a former primary discard its data.
	other := newCluster(t, tl, root, "other-db")
	p := c.instance(0)
	// a (ordinal 2) will be the most advanced standby, b (ordinal 1) the
	// one behind: the lowest-ordinal tie-break alone would pick b.
	b, a := c.instance(1), c.instance(2)
	o := other.instance(0)
	start := time.Now()
	p.start(t)
	o.start(t)
	p.waitReady(t, 120*time.Second)
	o.waitReady(t, 120*time.Second)
	c.appSQL(t, p, "CREATE TABLE t(id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 10)")
	a.start(t)
	b.start(t)
	a.waitReady(t, 120*time.Second)
	b.waitReady(t, 120*time.Second)
	t.Logf("timing: two primaries bootstrapped and two standbys cloned in %v", time.Since(start).Round(time.Millisecond))
	hosts := []int{p.port, b.port, a.port}
	rows := 10

	t.Run("not needed while the primary answers", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			grace int
			// down: the primary is stopped when the Job starts and started
			// again this long after.
			down time.Duration
		}{
			{name: "primary up", grace: 2},
			// The Job must wait the grace: a primary that restarts (a roll,
			// a deleted pod) is not failed over. The reason must be the
			// grace's: a Job that skipped it could still end not-needed by
			// luck, at its last check before pg_promote.
			{name: "primary back within the grace", grace: 15, down: 3 * time.Second},
		} {
			t.Run(tc.name, func(t *testing.T) {
				started := make(chan struct{})
				if tc.down > 0 {
					p.stop(t)
					go func() {
						defer close(started)
						time.Sleep(tc.down)
						p.start(t)
					}()
				} else {
					close(started)
				}
				r := c.runFailover(t, hosts, 0, tc.grace)
				<-started
				want := map[string]any{"result": "not-needed", "from": 0.0}
				if diff := cmp.Diff(want, r.outcome(t)); diff != "" {
					t.Errorf("outcome (-want +got):\n%s", diff)
				}
				if reason, _ := r.result["reason"].(string); !strings.HasPrefix(reason, "the primary answered again after ") {
					t.Errorf("reason %q: not the grace's wait", reason)
				}
				if tc.down > 0 && r.took < tc.down {
					t.Errorf("not-needed after %v, before the primary was started again (%v)", r.took, tc.down)
				}
				p.waitReady(t, 60*time.Second)
				for _, s := range []*instance{a, b} {
					if got := c.inRecovery(t, s); got != "t" {
						t.Errorf("%s: in recovery %q after a not-needed run", s.pod, got)
					}
				}
			})
		}
		a.waitReady(t, 60*time.Second)
		b.waitReady(t, 60*time.Second)
	})

	t.Run("a standby named the primary is not ready", func(t *testing.T) {
		// The key edited to b's ordinal: once it has named b longer than
		// NAMED_STANDBY_SECONDS, b's readiness probe fails, so that the
		// function starts the Job that finds the real primary (below).
		key := filepath.Join(c.scripts, "primary")
		writeFile(t, key, "1\n")
		defer writeFile(t, key, "0\n")
		probe := func(seconds string) (string, error) {
			return c.script(30*time.Second, b.env("NAMED_STANDBY_SECONDS="+seconds), Probe, "ready")
		}
		if out, err := probe("3600"); err != nil {
			t.Fatalf("b named for a moment: not ready: %v\n%s", err, out)
		}
		out, err := probe("0")
		if err == nil || !strings.Contains(out, "a standby named the primary") {
			t.Fatalf("b named the primary past the bound: %v, want not ready saying why:\n%s", err, out)
		}
		writeFile(t, key, "0\n")
		if out, err := probe("0"); err != nil {
			t.Errorf("b no longer named: not ready: %v\n%s", err, out)
		}
	})

	t.Run("the named primary is a standby", func(t *testing.T) {
		// The ConfigMap's primary key edited to a standby's ordinal (b, 1):
		// the Job started for it must not promote a standby past the live
		// primary p (on timeline 1, the last recorded one), whose writes
		// since the edit no standby may have: it reports p, found.
		r := c.runFailover(t, hosts, 1, 0, "LAST_TIMELINE=1")
		want := map[string]any{"result": "found", "from": 1.0, "to": 0.0, "timeline": 1.0}
		if diff := cmp.Diff(want, r.outcome(t)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\n%s", diff, tail(r.out, 30))
		}
		for in, want := range map[*instance]string{p: "f", a: "t", b: "t"} {
			if got := c.inRecovery(t, in); got != want {
				t.Errorf("%s: in recovery %q, want %q: a run that found the primary changes nothing", in.pod, got, want)
			}
		}
	})

	var promotedLSN string
	t.Run("promotes the most advanced standby", func(t *testing.T) {
		// b stops; rows written while it is away reach a only; the primary
		// stops (a clean stop sends a everything, its shutdown checkpoint
		// included); b comes back behind a, with no primary to catch up from.
		b.stop(t)
		c.appSQL(t, p, "INSERT INTO t SELECT generate_series(11, 20)")
		rows = 20
		c.waitReplayed(t, p, a)
		want := c.tableChecksums(t, p, c.db)
		p.stop(t)
		b.start(t)
		c.waitAccepting(t, b)
		lsn := func(in *instance) string {
			return c.superSQL(t, in, "postgres", "SELECT greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())")
		}
		if behind := c.superSQL(t, a, "postgres", fmt.Sprintf("SELECT '%s'::pg_lsn < '%s'::pg_lsn", lsn(b), lsn(a))); behind != "t" {
			t.Fatalf("the scenario needs b behind a: b at %s, a at %s", lsn(b), lsn(a))
		}

		// The fence (the lost primary's liveness bound) longer than the
		// grace: the silence waited is the longer of the two.
		r := c.runFailover(t, hosts, 0, 2, "FENCE_SECONDS=4")
		if diff := cmp.Diff(map[string]any{"result": "promoted", "from": 0.0, "to": 2.0, "timeline": 2.0, "reason": "PrimaryLost"}, r.outcome(t)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\n%s", diff, tail(r.out, 30))
		}
		promotedLSN, _ = r.result["lsn"].(string)
		if r.took < 4*time.Second {
			t.Errorf("promoted after %v, before the fence (4s, longer than the grace of 2s) ran out", r.took)
		}
		for _, tc := range []struct{ name, sql, want string }{
			{"a is a primary", "SELECT pg_is_in_recovery()", "f"},
			// The timeline a writes on now (its checkpoint's lags until the next one).
			{"on timeline 2", "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int", "2"},
			// DATABASE-k, '-' → '_': the slots the standby of ordinal k and
			// the old primary clone through (entrypoint.sh slot_name).
			{"slots of the other ordinals", "SELECT string_agg(slot_name || ':' || slot_type, ',' ORDER BY slot_name) FROM pg_replication_slots", "fo_db_0:physical,fo_db_1:physical"},
			{"the message's LSN is a's", "SELECT pg_current_wal_lsn() >= '" + promotedLSN + "'::pg_lsn", "t"},
		} {
			if got := c.superSQL(t, a, "postgres", tc.sql); got != tc.want {
				t.Errorf("%s: %s = %q, want %q", tc.name, tc.sql, got, tc.want)
			}
		}
		if got := c.inRecovery(t, b); got != "t" {
			t.Errorf("b: in recovery %q: only one standby may be promoted", got)
		}
		// Every row the primary had when it was lost is on a, and a takes writes.
		if diff := cmp.Diff(want, c.tableChecksums(t, a, c.db)); diff != "" {
			t.Errorf("a's tables (-primary before the loss +a):\n%s", diff)
		}
		c.appSQL(t, a, "INSERT INTO t VALUES (21)")
		rows = 21
	})
	if t.Failed() {
		return
	}

	t.Run("a second run reports the promotion", func(t *testing.T) {
		// The Job's pod may end before its result is recorded, and the Job
		// runs again with the primary still down: it must name the same
		// standby, not promote b (the only standby left). It reports during
		// the grace: no reason to wait when a primary already answers.
		// Long, so that half of it tells "waited the grace" from "did not"
		// on a loaded machine (CI runs this beside the e2e suite); a pass
		// does not wait it.
		const grace = 90
		lsnBefore := c.superSQL(t, a, "postgres", "SELECT pg_current_wal_lsn()")
		r := c.runFailover(t, hosts, 0, grace)
		if diff := cmp.Diff(map[string]any{"result": "promoted", "from": 0.0, "to": 2.0, "timeline": 2.0, "reason": "PrimaryLost"}, r.outcome(t)); diff != "" {
			t.Errorf("outcome (-want +got):\n%s\n%s", diff, tail(r.out, 30))
		}
		if r.took > grace*time.Second/2 {
			t.Errorf("reported after %v: an existing promotion should not wait out the grace (%ds)", r.took, grace)
		}
		if got := c.inRecovery(t, b); got != "t" {
			t.Errorf("b: in recovery %q after the second run: promoted a second standby", got)
		}
		// The LSN is a's now (it wrote row 21 since the promotion), not the
		// first run's.
		if lsn, _ := r.result["lsn"].(string); lsnRE.MatchString(lsn) {
			if got := c.superSQL(t, a, "postgres", fmt.Sprintf("SELECT '%s'::pg_lsn >= '%s'::pg_lsn AND '%s'::pg_lsn > '%s'::pg_lsn", lsn, lsnBefore, lsn, promotedLSN)); got != "t" {
				t.Errorf("second run reports LSN %s: a was at %s before it, the promotion at %s", lsn, lsnBefore, promotedLSN)
			}
		}
	})

	// The ConfigMap on the old primary's node still names it (the kubelet's
	// sync lags): it must not serve as a second writable primary.
	peers := fmt.Sprintf("PEER_HOSTS=127.0.0.1:%d 127.0.0.1:%d", b.port, a.port)
	t.Run("former primary named by a stale ConfigMap waits", func(t *testing.T) {
		p.start(t, peers)
		defer p.kill()
		waitFor(t, 20*time.Second, p.pod+" waits", func() error {
			return containsErr(p.lastLog(), fmt.Sprintf("127.0.0.1:%d timeline 2 is a primary on a newer timeline", a.port))
		})
		if _, err := os.Stat(filepath.Join(p.pgdata, "postmaster.pid")); !os.IsNotExist(err) {
			t.Errorf("postgres started: %v", err)
		}
		if err := p.probe("ready"); err == nil {
			t.Errorf("ready while waiting")
		}
		p.signal(syscall.SIGTERM)
		if err := p.waitExit(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a primary that finds a newer one is fenced by its readiness probe", func(t *testing.T) {
		// A frozen primary that resumes: it runs (here: started without
		// peers to ask), then its probe asks the peers.
		p.start(t)
		defer p.kill()
		p.waitReady(t, 60*time.Second)
		// In the moment it runs it takes a write a never gets (the window
		// of README Known limits, under async): the rejoin below must
		// discard it.
		c.appSQL(t, p, "INSERT INTO t VALUES (1000)")
		out, err := c.script(30*time.Second, append(p.env(), peers), Probe, "ready")
		if err == nil || !strings.Contains(out, "FENCED") {
			t.Fatalf("probe ready: %v, want a failure saying FENCED:\n%s", err, out)
		}
		// Stopped at once (immediate), not merely unready.
		if err := p.waitExit(10 * time.Second); err != nil {
			t.Fatalf("postgres still runs after the fence: %v", err)
		}
		if got := c.superSQL(t, a, "postgres", "SELECT pg_is_in_recovery()"); got != "f" {
			t.Errorf("a: in recovery %q", got)
		}
	})

	t.Run("former primary holds until a newer primary answers, then rewinds onto it", func(t *testing.T) {
		// The function named ordinal 2 the primary; ordinal 0's data was a
		// primary's (no standby.signal) and may hold writes a never got.
		writeFile(t, filepath.Join(c.scripts, "primary"), "2\n")
		if _, err := os.Stat(filepath.Join(p.pgdata, "standby.signal")); !os.IsNotExist(err) {
			t.Fatalf("the former primary's data has standby.signal (%v): not the case under test", err)
		}
		before := dirFingerprint(t, p.pgdata)
		for _, tc := range []struct {
			name   string
			port   int    // PRIMARY_PORT: what answers at the rw Service
			answer string // the entrypoint's log quotes it
		}{
			{"nothing answers", freePort(t), "answer 'none'"},
			{"a standby answers", b.port, "answer 'f|0'"},
			{"a primary on the same timeline answers", o.port, "answer 't|1'"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p.start(t, fmt.Sprintf("PRIMARY_PORT=%d", tc.port))
				defer p.kill() // also when a check below fails
				// Two waits: it re-ran itself (wait_and_retry) and decided
				// the same again, without wiping in between.
				waitFor(t, 20*time.Second, p.pod+" waits twice", func() error {
					if n := strings.Count(p.lastLog(), "WAITING, not starting postgres"); n < 2 {
						return fmt.Errorf("%d waits so far", n)
					}
					return nil
				})
				if !p.running() {
					t.Fatalf("entrypoint exited:\n%s", tail(p.lastLog(), 20))
				}
				if !strings.Contains(p.lastLog(), tc.answer) {
					t.Errorf("log does not quote %q:\n%s", tc.answer, tail(p.lastLog(), 10))
				}
				if state := strings.TrimSpace(readFile(t, filepath.Join(p.state, "database-state"))); state != "hold" {
					t.Errorf("state %q, want hold", state)
				}
				if err := p.probe("ready"); err == nil {
					t.Errorf("ready while waiting")
				}
				if err := p.probe("live"); err != nil {
					t.Errorf("not live while waiting (the kubelet would restart it in a loop): %v", err)
				}
				p.signal(syscall.SIGTERM)
				if err := p.waitExit(10 * time.Second); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(before, dirFingerprint(t, p.pgdata)); diff != "" {
					t.Errorf("data directory changed while waiting (-before +after):\n%s", diff)
				}
			})
		}
		if t.Failed() {
			return
		}

		// The promoted standby answers at PRIMARY_HOST: pg_rewind (after
		// crash recovery: the fence stopped it immediately) brings the old
		// data onto a's timeline, without the write a never got.
		want := c.tableChecksums(t, a, c.db)
		p.start(t, fmt.Sprintf("PRIMARY_PORT=%d", a.port))
		took := p.waitReady(t, 120*time.Second)
		t.Logf("timing: former primary rewound onto the new one and ready in %v", took.Round(time.Millisecond))
		log := p.lastLog()
		if !strings.Contains(log, "rewound onto the primary") || strings.Contains(log, "clone completed") {
			t.Errorf("log: want a rewind, not a clone:\n%s", tail(log, 20))
		}
		if _, err := os.Stat(p.pgdata + ".rewinding"); !os.IsNotExist(err) {
			t.Errorf("rewind marker left: %v", err)
		}
		for _, f := range []string{"database.cloned", "standby.signal"} {
			if _, err := os.Stat(filepath.Join(p.pgdata, f)); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
		if _, err := os.Stat(filepath.Join(p.pgdata, "database.reclone")); !os.IsNotExist(err) {
			t.Errorf("database.reclone left in the new clone: %v", err)
		}
		if got := c.superSQL(t, p, "postgres", "SELECT status || ':' || received_tli FROM pg_stat_wal_receiver"); got != "streaming:2" {
			t.Errorf("wal receiver %q, want streaming on timeline 2", got)
		}
		if got := c.superSQL(t, a, "postgres", "SELECT active FROM pg_replication_slots WHERE slot_name = 'fo_db_0'"); got != "t" {
			t.Errorf("slot fo_db_0 on a: active %q", got)
		}
		if diff := cmp.Diff(want, c.tableChecksums(t, p, c.db)); diff != "" {
			t.Errorf("tables (-a +former primary):\n%s", diff)
		}
		rows++
		c.insertAndWait(t, a, p, appPassword, rows)
	})
	if t.Failed() {
		return
	}

	t.Run("a rewind that did not finish is cloned again", func(t *testing.T) {
		// The pod died in pg_rewind: its marker is there, the data cannot
		// be trusted, whatever it looks like.
		p.stop(t)
		writeFile(t, p.pgdata+".rewinding", "")
		want := c.tableChecksums(t, a, c.db)
		p.start(t, fmt.Sprintf("PRIMARY_PORT=%d", a.port))
		p.waitReady(t, 120*time.Second)
		log := p.lastLog()
		for _, line := range []string{"did not finish", "clone completed"} {
			if !strings.Contains(log, line) {
				t.Errorf("log lacks %q:\n%s", line, tail(log, 20))
			}
		}
		if _, err := os.Stat(p.pgdata + ".rewinding"); !os.IsNotExist(err) {
			t.Errorf("rewind marker left: %v", err)
		}
		if diff := cmp.Diff(want, c.tableChecksums(t, p, c.db)); diff != "" {
			t.Errorf("tables (-a +clone):\n%s", diff)
		}
		rows++
		c.insertAndWait(t, a, p, appPassword, rows)
	})
}

// TestFailoverNoStandbyAnswers: with the primary and every standby silent
// there is nothing to promote: exit 5 (the Job retries) and no termination
// message, so the function records nothing.
func TestFailoverNoStandbyAnswers(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "gone")
	// Three rounds, not the Job's 15: the outcome is the same, and 15
	// rounds at a few seconds each under load (beside the e2e suite: 8 s a
	// round) outlasted the harness's bound.
	r := c.runFailover(t, []int{freePort(t), freePort(t), freePort(t)}, 0, 1, "CANDIDATE_ROUNDS=3")
	if r.code != 5 {
		t.Errorf("exit %d, want 5; output:\n%s", r.code, r.out)
	}
	if r.message != "" {
		t.Errorf("termination message %q, want none", r.message)
	}
	if err := containsErr(r.out, "no standby answers"); err != nil {
		t.Errorf("%v:\n%s", err, r.out)
	}
}

// TestFailoverTornRecord: the primary is lost while it streams a record,
// so the standby holds the record's beginning and can never replay it:
// its replayed position stays short of what it received. The Job must still
// promote it (it once waited for "replayed >= received" forever, on the
// real node). The standby streams through walCutter, which stops passing
// the primary's bytes after a budget, as a primary that froze mid-send.
func TestFailoverTornRecord(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "torn-db")
	p, s := c.instance(0), c.instance(1)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	c.appSQL(t, p, "CREATE TABLE t(id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 10)")
	cut := newWALCutter(t, p.port)
	s.start(t, "PRIMARY_PORT="+strconv.Itoa(cut.port))
	s.waitReady(t, 120*time.Second)
	c.waitReplayed(t, p, s)

	// One 64 MB record (a logical message: one WAL record, not TOAST
	// chunks), of which the standby gets 1 MB.
	cut.after(1 << 20)
	c.superSQL(t, p, "postgres", "SELECT pg_logical_emit_message(false, 'torn', repeat('x', 64 * 1024 * 1024))")
	waitFor(t, 30*time.Second, "the standby holding part of the record", func() error {
		row := c.superSQL(t, s, "postgres", "SELECT pg_last_wal_receive_lsn() - pg_last_wal_replay_lsn() > 65536")
		if row != "t" {
			return fmt.Errorf("received - replayed > 64 KB: %s", row)
		}
		return nil
	})
	p.kill()
	time.Sleep(2 * time.Second)
	if got := c.superSQL(t, s, "postgres", "SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()"); got != "t" {
		t.Fatalf("the scenario needs the standby short of what it received; replayed >= received: %s", got)
	}

	r := c.runFailover(t, []int{p.port, s.port}, 0, 1)
	if diff := cmp.Diff(map[string]any{"result": "promoted", "from": 0.0, "to": 1.0, "timeline": 2.0, "reason": "PrimaryLost"}, r.outcome(t)); diff != "" {
		t.Fatalf("outcome (-want +got):\n%s\n%s", diff, tail(r.out, 30))
	}
	if err := containsErr(r.out, "a record it cannot replay"); err != nil {
		t.Errorf("%v:\n%s", err, tail(r.out, 30))
	}
	// Every committed row is there, and the new primary takes writes.
	c.appSQL(t, s, "INSERT INTO t VALUES (11)")
	if got := c.appSQL(t, s, "SELECT count(*) FROM t"); got != "11" {
		t.Errorf("rows on the promoted standby: %s, want 11", got)
	}
}

// walCutter is a TCP proxy in front of a primary that passes the primary's
// bytes until a budget, set by after, runs out; then it passes nothing more
// and keeps the connection open, as a primary that froze while sending.
type walCutter struct {
	port int

	mu     sync.Mutex
	budget int64 // bytes left to pass; -1: no limit
}

func newWALCutter(t *testing.T, target int) *walCutter {
	t.Helper()
	w := &walCutter{port: freePort(t), budget: -1}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", w.port))
	if err != nil {
		t.Fatal(err)
	}
	var (
		connsMu sync.Mutex
		conns   []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", target))
			if err != nil {
				down.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, down, up)
			connsMu.Unlock()
			go func() { _, _ = io.Copy(up, down) }()
			go w.pass(down, up)
		}
	}()
	return w
}

// after lets n more bytes of the primary's through, then none.
func (w *walCutter) after(n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.budget = n
}

// take returns how many of n bytes may pass now.
func (w *walCutter) take(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.budget < 0 {
		return n
	}
	m := int(min(int64(n), w.budget))
	w.budget -= int64(m)
	return m
}

func (w *walCutter) pass(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			m := w.take(n)
			if m > 0 {
				if _, werr := dst.Write(buf[:m]); werr != nil {
					return
				}
			}
			if m < n {
				return // cut: the standby hears nothing more
			}
		}
		if err != nil {
			return
		}
	}
}
