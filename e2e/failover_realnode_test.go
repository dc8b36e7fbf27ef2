//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestFailover: a large Database (three instances) with synchronous
// replication, a client writing through the rw Service five times a second,
// and its primary lost three times in a row: frozen (every process of its pod
// stopped, as a node that hangs), its data volume emptied, frozen again. Each
// time the most advanced standby must take over, writes must succeed again
// through N, the old primary must rejoin as a standby, every instance must
// stream and the XR must be Ready; no acknowledged write may be missing. A
// fourth loss with asynchronous replication reports the writes lost.
func TestFailover(t *testing.T) {
	s := env
	s.realNode(t)
	const ns, db, writer = "failover-real", "ledger", "writer"
	s.realNamespace(t, ns)
	d := s.create(t, realDatabase(t, ns, db, "large", map[string]any{"durability": "sync"}))
	s.waitRealReady(t, d)
	if got := str(d.get(t), "status", "primary"); got != db+"-0" {
		t.Fatalf("status.primary = %q, want %s-0", got, db)
	}
	s.writerPod(t, ns, writer, db)
	eventually(t, 2*time.Minute, "the writer's first acknowledged write", func() (bool, string) {
		acks, _ := writerAcks(s.podLog(ns, writer, "writer"))
		return len(acks) > 0, lastLines(s.podLog(ns, writer, "writer"), 3)
	})

	losses := []struct{ name, how, durability string }{
		{"FrozenPrimary", "freeze", "sync"},
		{"EmptiedVolume", "empty", "sync"},
		{"FrozenAgain", "freeze", "sync"},
		// Crossplane core stops once the failover Job exists, for 45 s:
		// the Job promotes, nothing moves the rw Service meanwhile (writes
		// fail, none lands twice), and core finishes the failover when it
		// is back.
		{"CrossplaneDown", "freeze-core-down", "sync"},
		{"FrozenAsync", "freeze", "async"},
	}
	for _, l := range losses {
		if !s.step(t, l.name, func(t *testing.T) { s.loseThePrimary(t, d, ns, db, writer, l.how, l.durability) }) {
			return
		}
	}
	s.step(t, "Switchover", func(t *testing.T) { s.switchover(t, d, ns, db, writer) })
}

// switchover moves the primary back to ordinal 0 on purpose (spec.primary):
// no acknowledged write may be lost, with asynchronous replication too.
func (s *suite) switchover(t *testing.T, d database, ns, db, writer string) {
	from := str(d.get(t), "status", "primary")
	to := db + "-0"
	if from == to {
		to = db + "-1"
	}
	start := time.Now()
	u := d.patch(t, fmt.Sprintf(`{"spec":{"primary":%s}}`, strings.TrimPrefix(to, db+"-")))
	s.waitSynced(t, d, u.GetGeneration())
	eventually(t, 4*time.Minute, "switchover from "+from+" to "+to, func() (bool, string) {
		u := d.get(t)
		c := getCondition(u, "Failover")
		return str(u, "status", "primary") == to, fmt.Sprintf("primary %s; Failover %s %s: %s; jobs: %s", str(u, "status", "primary"), c.Status, c.Reason, c.Message, s.jobsState(ns))
	})
	t.Logf("switchover %s → %s in %s", from, to, time.Since(start).Round(time.Second))
	if r := str(d.get(t), "status", "failover", "last", "reason"); r != "Switchover" {
		t.Errorf("status.failover.last.reason %q, want Switchover", r)
	}
	s.checkAfterFailover(t, d, ns, db, writer, from, to, start, time.Now(), "async (switchover)", rejoinRewind)
}

// loseThePrimary loses the current primary one way, and checks the failover.
func (s *suite) loseThePrimary(t *testing.T, d database, ns, db, writer, how, durability string) {
	ctx := context.Background()
	if str(d.get(t), "spec", "durability") != durability {
		u := d.patch(t, fmt.Sprintf(`{"spec":{"durability":%q}}`, durability))
		s.waitSynced(t, d, u.GetGeneration())
		s.waitRealReady(t, d)
	}
	from := str(d.get(t), "status", "primary")
	count, _, _ := unstructured.NestedInt64(d.get(t).Object, "status", "failover", "count")
	pod, err := s.k.cs.CoreV1().Pods(ns).Get(ctx, from, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	switch how {
	case "freeze":
		// Every postgres process of the pod stops, the postmaster included
		// (only the host can stop a container's init): a hung primary.
		// It resumes once the failover is done, as a node that comes back:
		// the old primary must then fence itself.
		n := signalPod(t, string(pod.UID), syscall.SIGSTOP)
		t.Logf("froze %s: %d processes stopped", from, n)
		defer signalPod(t, string(pod.UID), syscall.SIGCONT)
	case "freeze-core-down":
		n := signalPod(t, string(pod.UID), syscall.SIGSTOP)
		t.Logf("froze %s: %d processes stopped", from, n)
		defer signalPod(t, string(pod.UID), syscall.SIGCONT)
		eventually(t, 2*time.Minute, "the failover Job composed", func() (bool, string) {
			j, err := s.k.cs.BatchV1().Jobs(ns).Get(ctx, db+"-failover", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := j.Annotations["database.example.com/failover-count"]
			return c == strconv.FormatInt(count, 10), "a Job with count " + c
		})
		s.xp.core.stop(15 * time.Second)
		t.Log("Crossplane core stopped")
		time.Sleep(45 * time.Second)
		if p := str(d.get(t), "status", "primary"); p != from {
			t.Errorf("status.primary moved to %s while Crossplane was down", p)
		}
		if err := s.xp.core.start(); err != nil {
			t.Fatalf("restart Crossplane core: %v", err)
		}
		t.Log("Crossplane core started again")
	case "empty":
		// The data directory emptied under a running postgres, which then
		// stops (SIGQUIT: immediate): the entrypoint finds an empty volume
		// of an initialised Database and holds.
		if out, err := s.execIn(ns, from, "postgres", "bash", "-c", `pid=$(head -1 "$PGDATA/postmaster.pid"); find "$PGDATA" -mindepth 1 -delete; kill -QUIT "$pid"`); err != nil {
			t.Logf("emptying %s: %v %s", from, err, out)
		}
	}

	var to string
	eventually(t, 4*time.Minute, "a standby promoted in place of "+from, func() (bool, string) {
		u := d.get(t)
		to = str(u, "status", "primary")
		c := getCondition(u, "Failover")
		return to != "" && to != from, fmt.Sprintf("primary %s; Failover %s %s: %s; %s; jobs: %s", to, c.Status, c.Reason, c.Message, s.podsState(ns, db), s.jobsState(ns))
	})
	promoted := time.Now()
	t.Logf("%s: %s promoted in place of %s after %s", how, to, from, promoted.Sub(lost).Round(time.Second))
	if strings.HasPrefix(how, "freeze") {
		signalPod(t, string(pod.UID), syscall.SIGCONT)
	}
	// A former primary with its data rewinds onto the new one; one whose
	// volume was emptied has nothing to rewind and is cloned.
	rejoin := rejoinRewind
	if how == "empty" {
		rejoin = rejoinClone
	}
	s.checkAfterFailover(t, d, ns, db, writer, from, to, lost, promoted, durability, rejoin)
	if c, _, _ := unstructured.NestedInt64(d.get(t).Object, "status", "failover", "count"); c <= count {
		t.Errorf("status.failover.count %d, want more than %d", c, count)
	}
	if r := str(d.get(t), "status", "failover", "last", "reason"); r != "PrimaryLost" {
		t.Errorf("status.failover.last.reason %q, want PrimaryLost", r)
	}
}

// checkAfterFailover: writes succeed again through N after promoted, the old
// primary streams as a standby, the XR is Ready, and no acknowledged write is
// missing unless durability is async (then the loss is reported).
func (s *suite) checkAfterFailover(t *testing.T, d database, ns, db, writer, from, to string, lost, promoted time.Time, durability, rejoin string) {

	// Writes succeed again through N.
	eventually(t, 2*time.Minute, "writes acknowledged through "+db+" after the failover", func() (bool, string) {
		acks, _ := writerAcks(s.podLog(ns, writer, "writer"))
		return len(acks) > 0 && acks[len(acks)-1].at.After(promoted), lastLines(s.podLog(ns, writer, "writer"), 3)
	})
	// The old primary rejoins as a standby; every instance streams.
	eventually(t, realReady, "three instances ready, two streaming from "+to, func() (bool, string) {
		out := s.superSQL(ns, to, "SELECT count(*) FILTER (WHERE state = 'streaming') || ' ' || coalesce(string_agg(application_name || ':' || state || ':' || sync_state, ','), '') FROM pg_stat_replication")
		return strings.HasPrefix(out, "2 ") && s.readyInstances(ns, db) == 3, out + "; " + s.podsState(ns, db)
	})
	if rec := s.superSQL(ns, from, "SELECT pg_is_in_recovery()"); rec != "t" {
		t.Errorf("the old primary %s is not a standby: pg_is_in_recovery() = %q", from, rec)
	}
	if got := s.rejoinedBy(ns, from); got != rejoin {
		t.Errorf("the old primary %s rejoined by %q, want %q", from, got, rejoin)
	} else {
		t.Logf("the old primary %s rejoined by %s", from, got)
	}
	u := s.waitRealReady(t, d)
	if last := str(u, "status", "failover", "last", "to"); last != to {
		t.Errorf("status.failover.last.to = %q, want %s", last, to)
	}

	// Nothing acknowledged is lost (sync); with async the loss is counted.
	// Writes lost by an earlier asynchronous failover are not counted again.
	acks, _ := writerAcks(s.podLog(ns, writer, "writer"))
	rows := s.superSQLLines(ns, to, `SELECT id FROM ticks`, db)
	have := map[int]bool{}
	for _, r := range rows {
		if n, err := strconv.Atoi(r); err == nil {
			have[n] = true
		}
	}
	var missing []int
	// The outage a client saw (RTO): the longest time between two
	// acknowledged writes from just before the loss on.
	var outage time.Duration
	var prev time.Time
	for _, a := range acks {
		if !have[a.id] && !knownLost[a.id] {
			missing = append(missing, a.id)
			knownLost[a.id] = true
		}
		if a.at.After(lost.Add(-5 * time.Second)) {
			if !prev.IsZero() {
				outage = max(outage, a.at.Sub(prev))
			}
		}
		prev = a.at
	}
	t.Logf("%s → %s (%s): RTO %s (longest time without an acknowledged write); promoted %s after the loss; %d writes acknowledged in all, %d of them missing now",
		from, to, durability, outage.Round(100*time.Millisecond), promoted.Sub(lost).Round(100*time.Millisecond), len(acks), len(missing))
	if durability != "async" && len(missing) > 0 {
		t.Errorf("%d acknowledged writes lost: %v", len(missing), missing[:min(len(missing), 20)])
	}
}

// How a former primary rejoins (entrypoint.sh's log says which).
const (
	rejoinRewind = "pg_rewind"
	rejoinClone  = "clone"
)

// rejoinedBy reads how pod's postgres container last became a standby of
// the new primary, in its current log or, restarted since, its previous one.
func (s *suite) rejoinedBy(ns, pod string) string {
	for _, previous := range []bool{false, true} {
		b, err := s.k.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "postgres", Previous: previous}).DoRaw(context.Background())
		if err != nil {
			continue
		}
		log := string(b)
		r, c := strings.LastIndex(log, "rewound onto the primary"), strings.LastIndex(log, "clone completed")
		switch {
		case r >= 0 && r > c:
			return rejoinRewind
		case c >= 0:
			return rejoinClone
		}
	}
	return "(neither in its logs)"
}

// knownLost are acknowledged writes an asynchronous failover lost.
var knownLost = map[int]bool{}

// writerPod runs a client that inserts one row a 200 ms through the rw
// Service, each in a new connection bounded to 5 s, and logs "ok ID MS" for
// every acknowledged insert (MS: Unix milliseconds).
func (s *suite) writerPod(t *testing.T, ns, name, db string) {
	t.Helper()
	secret := db + "-credentials"
	const loop = `until psql -X -q -c "CREATE TABLE IF NOT EXISTS ticks (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())"; do sleep 1; done
i=0
while :; do
	i=$((i+1))
	if out=$(timeout 5 psql -X -q -A -t -c "INSERT INTO ticks(id) VALUES ($i) RETURNING id" 2>&1) && [[ $out == "$i" ]]; then
		echo "ok $i $(date +%s%3N)"
	else
		echo "fail $i $(date +%s%3N) ${out//$'\n'/ }"
	fi
	sleep 0.2
done`
	p := psqlPod(ns, name, "writer", []string{"bash", "-c", loop}, []corev1.EnvVar{
		{Name: "PGHOST", Value: svc(db, ns)},
		{Name: "PGCONNECT_TIMEOUT", Value: "2"},
		secretEnv("PGUSER", secret, "username"),
		secretEnv("PGPASSWORD", secret, "password"),
		secretEnv("PGDATABASE", secret, "dbname"),
	})
	if _, err := s.k.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create writer pod: %v", err)
	}
}

type ack struct {
	id int
	at time.Time
}

// writerAcks parses the writer's log: the acknowledged writes, and the
// longest time between two consecutive ones (the outage a client saw).
func writerAcks(log string) ([]ack, time.Duration) {
	var acks []ack
	var gap time.Duration
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "ok" {
			continue
		}
		id, err1 := strconv.Atoi(f[1])
		ms, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		a := ack{id, time.UnixMilli(ms)}
		if n := len(acks); n > 0 {
			gap = max(gap, a.at.Sub(acks[n-1].at))
		}
		acks = append(acks, a)
	}
	return acks, gap
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// superSQLLines runs a query as the superuser in the app database on pod's
// socket and returns its rows.
func (s *suite) superSQLLines(ns, pod, stmt, db string) []string {
	out, err := s.execIn(ns, pod, "postgres", "bash", "-c",
		`exec psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$(<"$ADMIN_SECRET_DIR/username")" -d "$DB_NAME" -c "$0"`, stmt)
	if err != nil {
		return nil
	}
	return strings.Fields(out)
}

// readyInstances counts the Database's Ready instance pods.
func (s *suite) readyInstances(ns, db string) int {
	pods, err := s.instancePods(ns, db)
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range pods {
		if podReady(p) && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// signalPod sends sig to every PostgreSQL process of the pod with this UID,
// found in the kubelet's pod cgroups (cgroup v1, cgroupfs driver:
// .../pod<UID>/...); from the host, so that a container's init (the
// postmaster) can be stopped too: a primary that hangs. It returns how many
// processes it signalled.
func signalPod(t *testing.T, uid string, sig syscall.Signal) int {
	t.Helper()
	var pids []int
	_ = filepath.WalkDir("/sys/fs/cgroup/pids/kubepods", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" || !strings.Contains(p, "pod"+uid) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 1 || slices.Contains(pids, pid) {
				continue
			}
			// PostgreSQL's processes only: a probe or an exec caught in the
			// middle would hold the kubelet's prober for its 2-minute
			// runtime timeout, which no real hang does.
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	// SIGCONT finds none once the kubelet restarted the container.
	if len(pids) == 0 && sig == syscall.SIGSTOP {
		t.Errorf("no process of pod %s found in the kubelet's cgroups", uid)
	}
	return len(pids)
}
