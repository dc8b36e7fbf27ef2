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

// TestIsolatedPrimaryStopsItself: a primary cut off from every peer (a
// partition of its pod or node) stops postgres, whatever the durability:
// a failover may promote a standby at any moment, and what it acknowledged
// from then on would be lost and acknowledged by a deposed primary (S2, S3:
// docs/failover.md "Invariants"). Its kubelet's liveness probe, inside the
// pod, sees nothing wrong: the password sidecar's check_isolation is the
// fence. Before it, the primary ran on, writable, for as long as the
// partition lasted. It starts again only once a peer answers, and a
// standby down (a refused connection) or a standby that replied recently
// is no partition.
func TestIsolatedPrimaryStopsItself(t *testing.T) {
	t.Parallel()
	c, p, s := newPair(t, "iso-db")
	silent := blackhole(t)
	refused := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	marker := filepath.Join(p.pgdata, "database.isolated")
	sidecar := func(peers string) string {
		t.Helper()
		out, _ := c.script(time.Minute, append(p.env(), "SYNC_ONCE=1", "ISOLATION_FENCE=on", "PEER_TIMEOUT=1", "PEER_HOSTS="+peers), SyncPasswords)
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
		notFenced(t, sidecar(silent))
	})
	s.stop(t)
	t.Run("the standby is down, the network up", func(t *testing.T) {
		// No standby streams, but a peer's address refuses the connection:
		// that peer is down, not cut off; the primary stays writable (an
		// async primary outlives its standbys).
		notFenced(t, sidecar(silent+" "+refused))
		c.appSQL(t, p, "INSERT INTO iso VALUES (1)")
	})
	t.Run("cut off from every peer", func(t *testing.T) {
		started := time.Now()
		out := sidecar(silent + " " + silent)
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
