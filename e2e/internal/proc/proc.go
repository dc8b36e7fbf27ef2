// Package proc runs the components of the e2e suite's control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok, Crossplane
// core and its RBAC manager, the function, the real nodes' containerd,
// kubelet, kube-proxy, CoreDNS and kube-router, Prometheus, the object
// store) as child processes of the test binary, each with its output
// appended to a log file of its own; and the one-off commands the suite runs
// to completion (go build, the tool scripts, Crossplane's init commands,
// hack/package.sh and hack/push.sh), each with its output in a log file.
//
// The suite makes a [Proc] with [New] for each long-running component,
// starts it with [Proc.Start], waits for it to listen with [WaitTCP] on a
// port it got from [FreePort] (or to answer 200 on a health endpoint with
// [WaitHTTP]), and stops it by PID with [Proc.Stop] (a
// component that stops) or [Proc.Kill] (a machine that dies). When
// something fails it quotes the end of the component's log ([Proc.Tail],
// [TailFile]); to look only at what a component logged after some point,
// it notes the log's size ([FileSize]) and reads on from there
// ([ReadFrom]). [Run] and [Output] run a command to completion, bounded by
// a context, with its output in a log file.
//
// Every child gets SIGKILL from the kernel if the test binary dies without
// cleaning up (Linux's parent-death signal), so the package is Linux-only,
// like the suite.
package proc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// logPerm is the mode of the log files this package makes: logs, not
// secrets, readable by whoever looks into a kept run (E2E_KEEP=1, or a
// failed one), as they were before they moved here from the e2e package.
const logPerm = 0o644

// Proc is one component of the control plane, run as a child process with
// its output appended to a log file. It is stopped by its PID.
//
// The exported fields are read by each [Proc.Start]: a caller may change
// Bin, Args or Env between a [Proc.Stop] and the next Start (a restart with
// other flags, or wrapped in unshare(1)), not while Start runs.
type Proc struct {
	// Name names the component in errors and in its log's file name.
	Name string
	// Bin is the executable, a path or a name looked up in PATH.
	Bin string
	// Args are the command-line arguments, without Bin.
	Args []string
	// Env is added to the test binary's environment (a later entry wins).
	Env []string
	// Log is the file the process's stdout and stderr are appended to, with
	// a line at each start and exit.
	Log string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// New returns a Proc, not started, that runs bin with args and logs to
// <dir>/logs/<name>.log.
func New(dir, name, bin string, args ...string) *Proc {
	return &Proc{Name: name, Bin: bin, Args: args, Log: filepath.Join(dir, "logs", name+".log")}
}

// Start starts the process, appending its output to Log (made, with its
// folder, when missing). A Proc that has ended may be started again: that
// is how the suite restarts a component.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(p.Log), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, logPerm)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start: %s %s\n", time.Now().Format(time.RFC3339), p.Bin, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), p.Env...)
	// Own process group (a ^C to go test reaches us, we stop children by PID),
	// and killed by the kernel if the test binary dies without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format(time.RFC3339), err)
		_ = f.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Exited reports whether the process has ended, and how: never started,
// "exit status 0", or the error its Wait returned. A component of the
// control plane is not meant to end, so any of them is an error.
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true, errors.New("not started")
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err == nil {
			return true, errors.New("exit status 0")
		}
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process's PID, then SIGKILL after grace, and
// returns once it has ended. It does nothing when the process has not
// started or has already ended.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill sends SIGKILL to the process at once and waits until it has ended:
// a machine that dies, not a component that stops.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// PID is the process's ID from its last start, 0 when it never started
// (the suite reads its CPU time and memory from /proc/<PID>).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Tail returns the last n lines of the log (see [TailFile]).
func (p *Proc) Tail(n int) string { return TailFile(p.Log, n) }

// FileSize is path's size, 0 when it does not exist: where to start reading
// what a process logs from now on ([ReadFrom]).
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ReadFrom is what path holds from offset on, empty when unreadable.
func ReadFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// maxLine is how much of one log line TailFile quotes; the rest is cut to
// " ...", so that one huge line (a dumped object) does not drown a failure's
// message.
const maxLine = 600

// TailFile returns the last n lines of the file at path, each cut to 600
// bytes, for a failure's message; when the file cannot be opened it says so
// instead ("(no log: ...)"), since the message is what the reader gets.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > maxLine {
			lines[i] = l[:maxLine] + " ..."
		}
	}
	return strings.Join(lines, "\n")
}

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// FreePort returns a free TCP port on 127.0.0.1 not handed out before (in
// this test binary): a port is free once its probe closes, well before the
// component told to use it listens, and must not go to a second component
// in between.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !ports[port] {
			ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port")
}

// WaitTCP waits until something accepts connections on addr. With p not
// nil it gives up as soon as p has ended, saying so, rather than waiting out
// ctx for a component that will never listen.
func WaitTCP(ctx context.Context, addr string, p *Proc) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if p != nil {
			if ended, perr := p.Exited(); ended {
				return fmt.Errorf("%s exited (%w) before listening on %s", p.Name, perr, addr)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on %s: %w", addr, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitHTTP waits until a GET of url answers 200 OK: a component's health
// or readiness endpoint (etcd's /health, kube-apiserver's /readyz,
// kube-proxy's /healthz, ...). It asks every 250 ms, each request bounded by
// 2 s; tlsCfg, when not nil, is how an https URL is spoken to (the CA to
// trust, a client certificate). With p not nil it gives up as soon as p has
// ended, saying so, rather than waiting out ctx for a component that will
// never answer; when ctx ends first the error quotes the last answer (a
// status or why the request failed) and wraps ctx's error.
func WaitHTTP(ctx context.Context, url string, tlsCfg *tls.Config, p *Proc) error {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	var last string
	for {
		resp, err := cl.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if p != nil {
			if ended, perr := p.Exited(); ended {
				return fmt.Errorf("%s exited (%w) before %s answered", p.Name, perr, url)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never answered 200 (last: %s): %w", url, last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Run runs a command to completion with a bound, output to a log file.
// The command runs in dir with env added to the test binary's environment;
// its stdout and stderr are appended to the file at logPath, between a line
// that says what runs and one that says how it ended. It is killed when ctx
// ends (its output waited for at most 5 s more) or when the test binary
// dies.
func Run(ctx context.Context, logPath, dir string, env []string, bin string, args ...string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, logPerm)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s run: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	fmt.Fprintf(f, "=== %s end: %v\n", time.Now().Format(time.RFC3339), err)
	return err
}

// Output runs a command and returns its stdout; stderr goes to the log.
// Like [Run], but in the test binary's environment as it is, and stdout is
// the answer rather than part of the log.
func Output(ctx context.Context, logPath, dir, bin string, args ...string) (string, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, logPerm)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== %s run: %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	fmt.Fprintf(f, "=== %s end: %v\n", time.Now().Format(time.RFC3339), err)
	return string(out), err
}
