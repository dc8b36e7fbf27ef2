package proc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.log")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// numbered is lines 1..n, one a line, with a final newline.
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestTailFile(t *testing.T) {
	long := strings.Repeat("x", 700)
	huge := strings.Repeat("y", 200*1024) // past bufio.Scanner's default 64 KiB
	cases := []struct {
		name    string
		content string
		n       int
		want    string
	}{
		{"empty file", "", 5, ""},
		{"fewer lines than asked", "a\nb\n", 5, "a\nb"},
		{"exactly n", "a\nb\nc\n", 3, "a\nb\nc"},
		{"the last n", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no final newline", "a\nb\nc", 2, "b\nc"},
		{"many more than 4n lines: trimmed while reading", numbered(1000), 3, "998\n999\n1000"},
		{"blank lines count", "a\n\nb\n\n", 3, "\nb\n"},
		{"a long line cut at 600 bytes", "a\n" + long + "\n", 2, "a\n" + long[:600] + " ..."},
		{"a line of exactly 600 bytes kept", long[:600] + "\n", 1, long[:600]},
		{"a line past 64 KiB still read", huge + "\nz\n", 2, huge[:600] + " ...\nz"},
		{"n = 0", "a\nb\n", 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := TailFile(writeFile(t, c.content), c.n); got != c.want {
				t.Errorf("TailFile(%d) = %q, want %q", c.n, trunc(got), trunc(c.want))
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		got := TailFile(filepath.Join(t.TempDir(), "none.log"), 5)
		if !strings.HasPrefix(got, "(no log: ") || !strings.Contains(got, "no such file") {
			t.Errorf("TailFile of a missing file = %q, want (no log: ...no such file...)", got)
		}
	})
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-40:]
	}
	return s
}

func TestReadFromAndFileSize(t *testing.T) {
	const content = "first\nsecond\n"
	path := writeFile(t, content)
	if got := FileSize(path); got != int64(len(content)) {
		t.Fatalf("FileSize = %d, want %d", got, len(content))
	}
	cases := []struct {
		name   string
		offset int64
		want   string
	}{
		{"from the start", 0, content},
		{"from a line", int64(len("first\n")), "second\n"},
		{"mid-line", 2, "rst\nsecond\n"},
		{"at the end", int64(len(content)), ""},
		{"past the end", 1000, ""},
		{"negative offset", -1, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ReadFrom(path, c.offset); got != c.want {
				t.Errorf("ReadFrom(%d) = %q, want %q", c.offset, got, c.want)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "none.log")
	if got := FileSize(missing); got != 0 {
		t.Errorf("FileSize of a missing file = %d, want 0", got)
	}
	if got := ReadFrom(missing, 0); got != "" {
		t.Errorf("ReadFrom of a missing file = %q, want empty", got)
	}

	// What the suite does: note the size, let the process log more, read
	// only what came after.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	from := FileSize(path)
	if _, err := f.WriteString("third\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := ReadFrom(path, from); got != "third\n" {
		t.Errorf("ReadFrom(FileSize before the write) = %q, want %q", got, "third\n")
	}
}

func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("FreePort handed out %d twice", port)
		}
		seen[port] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("FreePort's %d is not free: %v", port, err)
		}
		l.Close()
	}
}

// waitLog waits until p's log holds want.
func waitLog(t *testing.T, p *Proc, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ReadFrom(p.Log, 0), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's log never held %q:\n%s", p.Name, want, p.Tail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// endedProc is a process named quitter that ran and exited with status 7.
func endedProc(t *testing.T) *Proc {
	t.Helper()
	p := New(t.TempDir(), "quitter", "sh", "-c", "exit 7")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitExited(t, p)
	return p
}

// waitExited waits until p has ended and returns how.
func waitExited(t *testing.T, p *Proc) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ended, err := p.Exited()
		if ended {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not end", p.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProc(t *testing.T) {
	cases := []struct {
		name   string
		script string
		env    []string
		// stop ends the process: Stop with a grace, Kill, or nothing (it
		// ends by itself).
		stop     func(*Proc)
		minTime  time.Duration // at least this long from start to end
		wantErr  string        // how Exited says it ended
		wantLogs []string
	}{
		{
			name: "ends by itself, exit 0", script: `echo "hello $GREETING"`, env: []string{"GREETING=world"},
			wantErr: "exit status 0", wantLogs: []string{"start: sh -c", "hello world", "exit: <nil>"},
		},
		{
			name: "ends by itself, failing", script: `echo oops >&2; exit 3`,
			wantErr: "exit status 3", wantLogs: []string{"oops", "exit: exit status 3"},
		},
		{
			name: "stopped by SIGTERM", script: `echo ready; exec sleep 60`,
			stop:    func(p *Proc) { p.Stop(time.Minute) },
			wantErr: "signal: terminated", wantLogs: []string{"ready", "exit: signal: terminated"},
		},
		{
			// An ignored signal stays ignored across exec: sleep ignores
			// SIGTERM, so only the SIGKILL after the grace ends it.
			name: "SIGTERM ignored: killed after the grace", script: `trap "" TERM; echo ready; exec sleep 60`,
			stop:    func(p *Proc) { p.Stop(300 * time.Millisecond) },
			minTime: 300 * time.Millisecond,
			wantErr: "signal: killed", wantLogs: []string{"exit: signal: killed"},
		},
		{
			name: "killed at once", script: `trap "" TERM; echo ready; exec sleep 60`,
			stop:    func(p *Proc) { p.Kill() },
			wantErr: "signal: killed", wantLogs: []string{"exit: signal: killed"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := New(t.TempDir(), "comp", "sh", "-c", c.script)
			if !strings.HasSuffix(p.Log, filepath.Join("logs", "comp.log")) {
				t.Errorf("Log = %s, want <dir>/logs/comp.log", p.Log)
			}
			if ended, err := p.Exited(); !ended || err == nil || err.Error() != "not started" {
				t.Errorf("before Start: Exited() = %v, %v; want true, not started", ended, err)
			}
			if p.PID() != 0 {
				t.Errorf("before Start: PID() = %d, want 0", p.PID())
			}
			p.Env = c.env
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			if p.PID() <= 0 {
				t.Errorf("PID() = %d after Start", p.PID())
			}
			start := time.Now()
			if c.stop != nil {
				waitLog(t, p, "\nready\n") // not the start line, which quotes the script
				if ended, err := p.Exited(); ended {
					t.Fatalf("ended before it was stopped: %v", err)
				}
				start = time.Now()
				c.stop(p)
				// Stop and Kill return once the process has ended.
				if ended, _ := p.Exited(); !ended {
					t.Fatal("Stop/Kill returned before the process ended")
				}
			}
			err := waitExited(t, p)
			if took := time.Since(start); took < c.minTime {
				t.Errorf("ended after %s, want at least %s", took, c.minTime)
			}
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("Exited() error = %v, want %s", err, c.wantErr)
			}
			log := ReadFrom(p.Log, 0)
			for _, w := range c.wantLogs {
				if !strings.Contains(log, w) {
					t.Errorf("log lacks %q:\n%s", w, log)
				}
			}
			p.Stop(time.Second) // on an ended process: a no-op
		})
	}
}

func TestProcRestartAppendsToLog(t *testing.T) {
	p := New(t.TempDir(), "comp", "sh", "-c", "echo first")
	for i, args := range [][]string{{"-c", "echo first"}, {"-c", "echo second"}} {
		p.Args = args
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		waitExited(t, p)
		if n := strings.Count(ReadFrom(p.Log, 0), "=== "); n != 2*(i+1) {
			t.Errorf("after start %d the log has %d start/exit lines, want %d", i+1, n, 2*(i+1))
		}
	}
	if log := ReadFrom(p.Log, 0); !strings.Contains(log, "first\n") || !strings.Contains(log, "second\n") {
		t.Errorf("the log does not hold both runs:\n%s", log)
	}
	if err := New(t.TempDir(), "nope", filepath.Join(t.TempDir(), "missing")).Start(); err == nil || !strings.Contains(err.Error(), "start nope") {
		t.Errorf("Start of a missing binary: %v, want start nope: ...", err)
	}
}

func TestWaitTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := "127.0.0.1:" + strconv.Itoa(closed)

	ended := endedProc(t)

	cases := []struct {
		name    string
		addr    string
		p       *Proc
		timeout time.Duration
		wantErr string // empty: nil
		wantIs  error
	}{
		{"listening", l.Addr().String(), nil, 5 * time.Second, "", nil},
		{"nothing listens, no process", closedAddr, nil, 500 * time.Millisecond, "nothing listens on " + closedAddr, context.DeadlineExceeded},
		{"the process ended", closedAddr, ended, time.Minute, "quitter exited (exit status 7) before listening on " + closedAddr, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			start := time.Now()
			err := WaitTCP(ctx, c.addr, c.p)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("WaitTCP: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("WaitTCP = %v, want %q", err, c.wantErr)
			}
			if c.wantIs != nil && !errors.Is(err, c.wantIs) {
				t.Errorf("WaitTCP = %v, want it to wrap %v", err, c.wantIs)
			}
			if took := time.Since(start); took > c.timeout/2 && c.p != nil {
				t.Errorf("took %s to notice the process had ended", took)
			}
		})
	}
}

func TestWaitHTTP(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer ok.Close()
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	// Ready from its third request on: WaitHTTP asks again.
	var asked atomic.Int32
	late := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer late.Close()
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	secure.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's handshakes
	secure.StartTLS()
	defer secure.Close()
	roots := x509.NewCertPool()
	roots.AddCert(secure.Certificate())
	trusting := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	closed, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://127.0.0.1:" + strconv.Itoa(closed) + "/healthz"

	running := New(t.TempDir(), "runner", "sleep", "60")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(running.Kill)
	ended := endedProc(t)

	cases := []struct {
		name    string
		url     string
		tlsCfg  *tls.Config
		p       *Proc
		timeout time.Duration
		wantErr []string // empty: nil
		wantIs  error
		within  time.Duration // when not 0, it must give up this fast
	}{
		{name: "200 at once", url: ok.URL + "/readyz", timeout: 5 * time.Second},
		{name: "200 at once, the process running", url: ok.URL, p: running, timeout: 5 * time.Second},
		{name: "200 after two 503s", url: late.URL, p: running, timeout: 10 * time.Second},
		{name: "https, the server's CA trusted", url: secure.URL, tlsCfg: trusting, timeout: 5 * time.Second},
		{
			name: "https, the server's CA not trusted", url: secure.URL, timeout: 700 * time.Millisecond,
			wantErr: []string{secure.URL + " never answered 200 (last: ", "certificate"}, wantIs: context.DeadlineExceeded,
		},
		{
			name: "503 until the timeout", url: unavailable.URL, p: running, timeout: 700 * time.Millisecond,
			wantErr: []string{unavailable.URL + " never answered 200 (last: 503 Service Unavailable)"}, wantIs: context.DeadlineExceeded,
		},
		{
			name: "nothing listens", url: closedURL, timeout: 700 * time.Millisecond,
			wantErr: []string{closedURL + " never answered 200 (last: ", "connection refused"}, wantIs: context.DeadlineExceeded,
		},
		{
			name: "the process ended first", url: closedURL, p: ended, timeout: time.Minute,
			wantErr: []string{"quitter exited (exit status 7) before " + closedURL + " answered"}, within: 10 * time.Second,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			start := time.Now()
			err := WaitHTTP(ctx, c.url, c.tlsCfg, c.p)
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Fatalf("WaitHTTP: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("WaitHTTP = nil, want %q", c.wantErr)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("WaitHTTP = %v, want it to say %q", err, w)
				}
			}
			if c.wantIs != nil && !errors.Is(err, c.wantIs) {
				t.Errorf("WaitHTTP = %v, want it to wrap %v", err, c.wantIs)
			}
			if took := time.Since(start); c.within != 0 && took > c.within {
				t.Errorf("took %s to notice the process had ended", took)
			}
		})
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("the late server was asked %d times, want 3 (two 503s, then 200)", n)
	}
}

func TestRunAndOutput(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "run.log")
	cases := []struct {
		name    string
		output  bool // Output rather than Run
		env     []string
		script  string
		timeout time.Duration
		wantOut string
		wantErr string
		wantLog []string
		notLog  []string
	}{
		{
			name: "Run: env, dir, both streams to the log", env: []string{"X=42"},
			script: `echo "out $X in $(basename "$PWD")"; echo err >&2`, timeout: 10 * time.Second,
			wantLog: []string{"run: sh -c", "out 42 in " + filepath.Base(dir), "err\n", "end: <nil>"},
		},
		{
			name: "Run: failing", script: `exit 4`, timeout: 10 * time.Second,
			wantErr: "exit status 4", wantLog: []string{"end: exit status 4"},
		},
		{
			name: "Run: bounded by the context", script: `exec sleep 60`, timeout: 300 * time.Millisecond,
			wantErr: "signal: killed", wantLog: []string{"end: signal: killed"},
		},
		{
			name: "Output: stdout answered, stderr logged", output: true,
			script: `echo answer; echo complaint >&2`, timeout: 10 * time.Second,
			wantOut: "answer\n", wantLog: []string{"complaint", "end: <nil>"}, notLog: []string{"answer\n"},
		},
		{
			name: "Output: failing", output: true, script: `echo partial; exit 2`, timeout: 10 * time.Second,
			wantOut: "partial\n", wantErr: "exit status 2", wantLog: []string{"end: exit status 2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			from := FileSize(logPath)
			var out string
			var err error
			if c.output {
				out, err = Output(ctx, logPath, dir, "sh", "-c", c.script)
			} else {
				err = Run(ctx, logPath, dir, c.env, "sh", "-c", c.script)
			}
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
				t.Errorf("error = %v, want %q", err, c.wantErr)
			}
			if out != c.wantOut {
				t.Errorf("output = %q, want %q", out, c.wantOut)
			}
			log := ReadFrom(logPath, from)
			for _, w := range c.wantLog {
				if !strings.Contains(log, w) {
					t.Errorf("log lacks %q:\n%s", w, log)
				}
			}
			for _, w := range c.notLog {
				if strings.Contains(log, w) {
					t.Errorf("log holds %q:\n%s", w, log)
				}
			}
		})
	}
	if err := Run(context.Background(), filepath.Join(dir, "no", "such", "dir.log"), dir, nil, "true"); err == nil {
		t.Error("Run with an unwritable log: no error")
	}
}
