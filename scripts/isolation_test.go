package scripts

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blackhole is a loopback host:port that never answers a connection, as a
// peer seen from inside a partition: a listener whose accept queue (backlog
// 0) is full, so that the kernel drops every further SYN and a connection
// attempt times out instead of being refused.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: connections complete until it is full; then a dial
	// times out, and so will the scripts'.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr
			}
			t.Fatalf("filling %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		if i > 8 {
			t.Fatalf("%s still accepts connections after %d", addr, i)
		}
	}
}

// listening is a loopback host:port that accepts every connection.
func listening(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String()
}

// TestIsolatedPrimaryStopsItself: a primary cut off from every peer and from
// the API server (a partition of its pod or node) stops postgres, whatever
// the durability:
// a failover may promote a standby at any moment, and what it acknowledged
// from then on would be lost and acknowledged by a deposed primary (S2, S3:
// docs/failover.md "Invariants"). Its kubelet's liveness probe, inside the
// pod, sees nothing wrong: the password sidecar's check_isolation is the
// fence. Before it, the primary ran on, writable, for as long as the
// partition lasted. It starts again only once a peer answers, and a
// standby down (a refused connection), a standby that replied recently, or
// peers silent while the API server answers (a roll) is no partition.
func TestIsolatedPrimaryStopsItself(t *testing.T) {
	t.Parallel()
	c, p, s := newPair(t, "iso-db")
	silent := blackhole(t)
	refused := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	marker := filepath.Join(p.pgdata, "database.isolated")
	// The witness (the API server, as the kubelet names it to every
	// container) that answers: a listener that accepts.
	witness := listening(t)
	// The fence is on by default: no ISOLATION_FENCE here.
	sidecar := func(peers, witness string) string {
		t.Helper()
		out, _ := c.script(time.Minute, append(p.env(), "SYNC_ONCE=1", "PEER_TIMEOUT=1", "PEER_HOSTS="+peers, "ISOLATION_WITNESS="+witness), SyncPasswords)
		return out
	}
	notFenced := func(t *testing.T, out string) {
		t.Helper()
		if strings.Contains(out, "ISOLATED") || !p.running() {
			t.Fatalf("the primary was fenced (running %v):\n%s", p.running(), out)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("%s: %v", marker, err)
		}
	}

	t.Run("a standby replied just now", func(t *testing.T) {
		// WAL streamed and replayed: the standby has just replied. The
		// peers do not answer (a wrong PEER_HOSTS), and need not be asked.
		c.appSQL(t, p, "CREATE TABLE iso (id int PRIMARY KEY)")
		c.waitReplayed(t, p, s)
		notFenced(t, sidecar(silent, silent))
	})
	s.stop(t)
	t.Run("the standby is down, the network up", func(t *testing.T) {
		// No standby streams, but a peer's address refuses the connection:
		// that peer is down, not cut off; the primary stays writable (an
		// async primary outlives its standbys).
		notFenced(t, sidecar(silent+" "+refused, silent))
		c.appSQL(t, p, "INSERT INTO iso VALUES (1)")
	})
	t.Run("every peer silent, the API server answers", func(t *testing.T) {
		// A standby's pod being replaced in a roll: its old address still
		// in DNS, answering nothing. The control plane still hears this
		// pod, so nothing fails it over: no partition (before the witness,
		// this stopped a healthy primary in CI).
		notFenced(t, sidecar(silent+" "+silent, witness))
		c.appSQL(t, p, "INSERT INTO iso VALUES (4)")
	})
	t.Run("cut off from every peer and the API server", func(t *testing.T) {
		started := time.Now()
		// The witness refuses (a Service with no endpoint, from this
		// node's proxy): no proof that the control plane hears this pod.
		out := sidecar(silent+" "+silent, refused)
		if !strings.Contains(out, "ISOLATED") {
			t.Fatalf("no fence:\n%s", out)
		}
		if err := p.waitExit(30 * time.Second); err != nil {
			t.Fatalf("postgres still runs: %v", err)
		}
		t.Logf("isolated primary stopped %v after the sidecar's round began", time.Since(started).Round(time.Millisecond))
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("%s: %v", marker, err)
		}
		if _, err := c.psql(p.port, c.app, c.secret(t, "app", "password"), c.db, "INSERT INTO iso VALUES (2)"); err == nil {
			t.Fatal("a write succeeded on the stopped primary")
		}
	})
	t.Run("it holds while no peer answers", func(t *testing.T) {
		p.start(t, "PEER_TIMEOUT=1", "PEER_HOSTS="+silent)
		waitFor(t, 30*time.Second, p.pod+" holds", func() error { return containsErr(p.lastLog(), "cut off from every peer") })
		if _, err := os.Stat(filepath.Join(p.pgdata, "postmaster.pid")); !os.IsNotExist(err) {
			t.Errorf("postgres started: %v", err)
		}
		p.kill()
	})
	t.Run("it starts again once a peer answers", func(t *testing.T) {
		p.start(t, "PEER_TIMEOUT=1", "PEER_HOSTS="+refused)
		p.waitReady(t, 60*time.Second)
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Errorf("%s after the restart: %v", marker, err)
		}
		if got := c.appSQL(t, p, "INSERT INTO iso VALUES (3) RETURNING id"); got != "3" {
			t.Errorf("write after the restart: %q", got)
		}
	})
}
