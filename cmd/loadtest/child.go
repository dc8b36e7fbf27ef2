package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// child is a function binary started by the load tool.
type child struct {
	cmd     *exec.Cmd
	pid     string
	addr    string
	logPath string
	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid after exited is closed
}

// children are the processes this tool started and has not reaped yet; they
// are killed on every way out (normal end, error, Ctrl-C, SIGTERM, timeout).
var children = struct {
	sync.Mutex
	m map[*child]struct{}
}{m: map[*child]struct{}{}}

// freeLoopbackAddr returns 127.0.0.1:<port> for a port that was free a moment
// ago. The function binary binds it right after; the race is benign on a test
// machine (startup then fails and is reported).
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startChild starts bin serving plain-text gRPC on a free loopback port with
// the metrics server off. Its stdout and stderr go to a log file (the
// function's own logging is part of its cost, as in a pod), which is removed
// by stop unless keepLogs.
func startChild(bin string, extraEnv []string, logDir string) (*child, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, fmt.Errorf("cannot find a free loopback port: %w", err)
	}
	logf, err := os.CreateTemp(logDir, "loadtest-child-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy of the descriptor

	cmd := exec.Command(bin, "--insecure", "--address="+addr, "--metrics-address=")
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), extraEnv...)
	// Own process group (a Ctrl-C in the terminal reaches only us, and we
	// kill the child deliberately), and SIGKILL if this tool dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.Remove(logf.Name())
		return nil, fmt.Errorf("cannot start %s: %w", bin, err)
	}
	c := &child{cmd: cmd, pid: strconv.Itoa(cmd.Process.Pid), addr: addr, logPath: logf.Name(), exited: make(chan struct{})}
	children.Lock()
	children.m[c] = struct{}{}
	children.Unlock()
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// stop kills the child (SIGKILL: nothing to flush, and it must not linger)
// and waits for it to be reaped.
func (c *child) stop(keepLogs bool) {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	children.Lock()
	delete(children.m, c)
	children.Unlock()
	if !keepLogs {
		_ = os.Remove(c.logPath)
	}
}

// logTail returns the last n bytes of the child's log, for error messages.
func (c *child) logTail(n int64) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	b := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// killAllChildren is the emergency exit: signal handler and global timeout.
func killAllChildren() {
	children.Lock()
	defer children.Unlock()
	for c := range children.m {
		_ = c.cmd.Process.Kill()
	}
}
