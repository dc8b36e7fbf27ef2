package scripts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/example/function-database/internal/scram"
)

// The tests run real PostgreSQL servers, started by the scripts themselves,
// as the postgres OS user (initdb refuses root) on 127.0.0.1 only.

// tools is what the tests need from the machine.
type tools struct {
	bin       string // directory of initdb, postgres, pg_ctl, psql, ...
	uid, gid  int
	setCred   bool // running as root: start children as the postgres user
	shellchk  string
	bashPath  string
	pgVersion string
}

var (
	toolsOnce sync.Once
	toolsVal  *tools
	toolsErr  error
)

// missing fails the test in a full run (hack/test.sh sets FNDB_REQUIRE_TOOLS;
// CI sets CI) and skips it in a run narrowed on purpose (go test alone).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" || os.Getenv("FNDB_REQUIRE_TOOLS") != "" {
		t.Fatalf(format+" (hack/install-postgres.sh installs it)", args...)
	}
	t.Skipf(format+" (skipping; hack/install-postgres.sh installs it)", args...)
}

func findTools() (*tools, error) {
	tl := &tools{}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil, errors.New("bash not found")
	}
	tl.bashPath = bash
	bin := os.Getenv("POSTGRES_BIN")
	if bin == "" {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
		if len(matches) > 0 {
			bin = filepath.Dir(matches[0])
		} else if p, err := exec.LookPath("initdb"); err == nil {
			bin = filepath.Dir(p)
		}
	}
	if bin == "" {
		return nil, errors.New("PostgreSQL server binaries (initdb) not found: set POSTGRES_BIN or install Debian's postgresql")
	}
	for _, name := range []string{"initdb", "postgres", "pg_ctl", "pg_basebackup", "pg_receivewal", "pg_dump", "pg_dumpall", "pg_restore", "psql", "pg_isready"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%s missing in %s", name, bin)
		}
	}
	tl.bin = bin
	out, err := exec.Command(filepath.Join(bin, "postgres"), "-V").Output()
	if err != nil {
		return nil, fmt.Errorf("postgres -V: %w", err)
	}
	tl.pgVersion = strings.TrimSpace(string(out))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("running as root but there is no postgres OS user to run the servers as")
		}
		tl.uid, _ = strconv.Atoi(u.Uid)
		tl.gid, _ = strconv.Atoi(u.Gid)
		tl.setCred = true
	} else {
		tl.uid, tl.gid = os.Geteuid(), os.Getegid()
	}
	if p, err := exec.LookPath("shellcheck"); err == nil {
		tl.shellchk = p
	}
	return tl, nil
}

func versionOf(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// requirePostgres returns the tools or skips/fails the test.
func requirePostgres(t *testing.T) *tools {
	t.Helper()
	toolsOnce.Do(func() { toolsVal, toolsErr = findTools() })
	if toolsErr != nil {
		missing(t, "%v", toolsErr)
	}
	return toolsVal
}

// command runs name as the postgres user (when root), in its own process
// group so that a kill reaches its children.
func (tl *tools) command(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if tl.setCred {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(tl.uid), Gid: uint32(tl.gid), NoSetGroups: true}
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (tl *tools) baseEnv(home string) []string {
	return []string{
		"PATH=" + tl.bin + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"TZ=UTC",
	}
}

// chown gives path to the postgres user.
func (tl *tools) chown(t *testing.T, path string) {
	t.Helper()
	if err := os.Chown(path, tl.uid, tl.gid); err != nil {
		t.Fatal(err)
	}
}

// mkdir creates a directory owned by the postgres user.
func (tl *tools) mkdir(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	tl.chown(t, path)
	return path
}

// newRoot makes a temp directory the postgres user can use; removed at the
// very end (registered first, so it runs after every server is stopped).
func newRoot(t *testing.T, tl *tools) string {
	t.Helper()
	root, err := os.MkdirTemp("", "fndb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tl.chown(t, root)
	return root
}

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// freePort returns a free TCP port on 127.0.0.1, never the same twice.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !ports[port] {
			ports[port] = true
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// Passwords with every character that needs quoting somewhere (psql, libpq
// passfile, conninfo, shell).
const (
	suPassword   = `Su'per:pa\ss "word" $HOME ` + "`id`"
	replPassword = `re:pl\ic'a#tion$1`
	appPassword  = `app'pw:1\2$(id);--`
)

// testTier is the function's postgresql.conf for tests: loopback only, small,
// with the WAL bounds the function writes for a 1Gi data volume (configmap.go
// walSettings), in its format.
const testTier = `# tier settings (test)
listen_addresses = '127.0.0.1'
max_connections = 40
max_slot_wal_keep_size = '128MB'
max_wal_size = '256MB'
shared_buffers = '16MB'
wal_keep_size = '64MB'
`

// cluster is one Database: its scripts ConfigMap and Secrets, as directories.
type cluster struct {
	t        *testing.T
	tl       *tools
	root     string
	name     string // Database name N
	db, app  string // SQL names (N with '-' → '_')
	su, repl string
	scripts  string // SCRIPTS_DIR
	appSec   string // APP_SECRET_DIR
	adminSec string // ADMIN_SECRET_DIR
	primary  *instance
	// objStore is OBJECT_STORAGE_DIR and archiveEnv pgBackRest's
	// environment, when the cluster archives (archive_test.go).
	objStore   string
	archiveEnv []string
}

func newCluster(t *testing.T, tl *tools, root, name string) *cluster {
	t.Helper()
	sqlName := strings.ReplaceAll(name, "-", "_")
	c := &cluster{t: t, tl: tl, root: tl.mkdir(t, filepath.Join(root, name)), name: name, db: sqlName, app: sqlName, su: "postgres", repl: "replicator"}
	c.scripts = tl.mkdir(t, filepath.Join(c.root, "scripts"))
	// What the pods run: the scripts as shipped (Shipped), not their source.
	for name, content := range Shipped() {
		writeFile(t, filepath.Join(c.scripts, name), content)
	}
	writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), testTier)
	c.appSec = tl.mkdir(t, filepath.Join(c.root, "secret-app"))
	c.adminSec = tl.mkdir(t, filepath.Join(c.root, "secret-superuser"))
	c.setSecret(t, "app", "username", c.app)
	c.setSecret(t, "app", "password", appPassword)
	c.setSecret(t, "superuser", "username", c.su)
	c.setSecret(t, "superuser", "password", suPassword)
	c.setSecret(t, "superuser", "replication-username", c.repl)
	c.setSecret(t, "superuser", "replication-password", replPassword)
	return c
}

// setSecret sets a password (or a name) as the function's reconcile does:
// the SCRAM verifier of a password in the superuser Secret, and the app
// password's copy there, first; then the mounted secret file itself,
// atomically (as the kubelet does), so that a sidecar reading between the
// two never meets a password whose verifier is not there yet.
func (c *cluster) setSecret(t *testing.T, secret, key, value string) {
	t.Helper()
	role, verifierKey, copyKey := "", "", ""
	switch secret + "/" + key {
	case "app/password":
		role, verifierKey, copyKey = c.app, "app-password-verifier", "app-password"
	case "superuser/password":
		role, verifierKey = c.su, "password-verifier"
	case "superuser/replication-password":
		role, verifierKey = c.repl, "replication-password-verifier"
	}
	if verifierKey != "" {
		salt := scram.StableSalt("scripts-test/" + c.name + "/" + role)
		c.setSecretFile(t, "superuser", verifierKey, scram.Verifier(value, salt, scram.Iterations))
	}
	if copyKey != "" {
		c.setSecretFile(t, "superuser", copyKey, value)
	}
	c.setSecretFile(t, secret, key, value)
}

// setSecretFile replaces one mounted secret file atomically (as the
// kubelet does), and nothing else: an edit the function has not seen yet.
func (c *cluster) setSecretFile(t *testing.T, secret, key, value string) {
	t.Helper()
	dir := c.appSec
	if secret == "superuser" {
		dir = c.adminSec
	}
	writeFile(t, filepath.Join(dir, key), value)
}

func (c *cluster) secret(t *testing.T, secret, key string) string {
	t.Helper()
	dir := c.appSec
	if secret == "superuser" {
		dir = c.adminSec
	}
	b, err := os.ReadFile(filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeFile writes via a temporary file and a rename, world-readable.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// instance is one pod of the StatefulSet: its postgres container.
type instance struct {
	c      *cluster
	pod    string
	dir    string
	pgdata string
	sock   string
	state  string
	port   int
	starts int
	// extra is appended to the pod's environment (its containers and probes).
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// newPair is a new cluster named name with a primary (ordinal 0) and one
// standby (ordinal 1), both ready.
func newPair(t *testing.T, name string) (c *cluster, p, s *instance) {
	t.Helper()
	tl := requirePostgres(t)
	c = newCluster(t, tl, newRoot(t, tl), name)
	p, s = c.instance(0), c.instance(1)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	s.start(t)
	s.waitReady(t, 120*time.Second)
	return c, p, s
}

func (c *cluster) instance(ordinal int) *instance {
	t := c.t
	pod := fmt.Sprintf("%s-%d", c.name, ordinal)
	in := &instance{c: c, pod: pod, dir: c.tl.mkdir(t, filepath.Join(c.root, pod)), port: freePort(t)}
	in.pgdata = filepath.Join(in.dir, "data", "pgdata") // created by the script
	c.tl.mkdir(t, filepath.Join(in.dir, "data"))
	in.sock = c.tl.mkdir(t, filepath.Join(in.dir, "run"))
	in.state = c.tl.mkdir(t, filepath.Join(in.dir, "tmp"))
	if ordinal == 0 {
		c.primary = in
	}
	t.Cleanup(func() {
		in.kill()
		if t.Failed() {
			t.Logf("--- %s logs (last 60 lines) ---\n%s", pod, tail(in.logs(), 60))
		} else if os.Getenv("FNDB_TEST_LOGS") != "" {
			t.Logf("--- %s logs ---\n%s", pod, in.logs())
		}
	})
	return in
}

// env is the postgres container's environment (CONTRACT.md) for this pod.
// terminationLog is the file the kubelet reads a container's termination
// message from (/dev/termination-log in a pod).
func (in *instance) terminationLog() string {
	return filepath.Join(in.dir, "termination-log")
}

func (in *instance) env(extra ...string) []string {
	c := in.c
	primaryPort := in.port
	if c.primary != nil {
		primaryPort = c.primary.port
	}
	env := append(c.tl.baseEnv(in.dir),
		"POD_NAME="+in.pod,
		"PGDATA="+in.pgdata,
		"PGPORT="+strconv.Itoa(in.port),
		"PGHOST="+in.sock,
		"DB_NAME="+c.db,
		"APP_USER="+c.app,
		"PRIMARY_HOST=127.0.0.1",
		"PRIMARY_PORT="+strconv.Itoa(primaryPort),
		"SCRIPTS_DIR="+c.scripts,
		"APP_SECRET_DIR="+c.appSec,
		"ADMIN_SECRET_DIR="+c.adminSec,
		"STATE_DIR="+in.state,
		"RETRY_INTERVAL=1",
		"SYNC_INTERVAL=1",
		// The tests move the primary without the function: a standby
		// left named in SCRIPTS_DIR/primary would turn unready after the
		// pods' 120 s (probe.sh named_standby), which only
		// TestFailover/a standby named the primary is about.
		"NAMED_STANDBY_SECONDS=86400",
		"TERMINATION_LOG="+in.terminationLog(),
	)
	env = append(env, in.archiveEnvOf()...)
	env = append(env, in.extra...)
	return append(env, extra...)
}

// start runs entrypoint.sh (in the background) with the pod's environment.
func (in *instance) start(t *testing.T, extra ...string) {
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil {
		select {
		case <-in.done:
		default:
			t.Fatalf("%s: already running", in.pod)
		}
	}
	in.starts++
	logf, err := os.Create(filepath.Join(in.dir, fmt.Sprintf("entrypoint-%d.log", in.starts)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := in.c.tl.command(context.Background(), in.dir, in.env(extra...), in.c.tl.bashPath, filepath.Join(in.c.scripts, Entrypoint))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	in.cmd, in.done = cmd, done
	go func() {
		err := cmd.Wait()
		logf.Close()
		in.mu.Lock()
		in.err = err
		in.mu.Unlock()
		close(done)
	}()
}

// lastLog is the output of the latest start.
func (in *instance) lastLog() string {
	b, _ := os.ReadFile(filepath.Join(in.dir, fmt.Sprintf("entrypoint-%d.log", in.starts)))
	return string(b)
}

// logs is the output of every start.
func (in *instance) logs() string {
	var sb strings.Builder
	for i := 1; i <= in.starts; i++ {
		b, _ := os.ReadFile(filepath.Join(in.dir, fmt.Sprintf("entrypoint-%d.log", i)))
		fmt.Fprintf(&sb, "== start %d ==\n%s", i, b)
	}
	return sb.String()
}

func (in *instance) running() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return false
	}
	select {
	case <-in.done:
		return false
	default:
		return true
	}
}

// waitExit waits for the entrypoint process to end.
func (in *instance) waitExit(timeout time.Duration) error {
	in.mu.Lock()
	done := in.done
	in.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s: still running after %v", in.pod, timeout)
	}
}

// pgctl runs pg_ctl on the pod's data directory as the postgres user.
func (in *instance) pgctl(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := in.c.tl.command(ctx, in.dir, in.c.tl.baseEnv(in.dir), filepath.Join(in.c.tl.bin, "pg_ctl"), append([]string{"-D", in.pgdata}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %w: %s", args, err, out)
	}
	return nil
}

// stop shuts postgres down cleanly (as the kubelet's SIGTERM would with
// -m fast) and waits for the container process to end.
func (in *instance) stop(t *testing.T) {
	t.Helper()
	if err := in.pgctl("stop", "-m", "fast", "-w"); err != nil {
		t.Fatal(err)
	}
	if err := in.waitExit(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// signal sends sig to the entrypoint's process group.
func (in *instance) signal(sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil && in.cmd.Process != nil {
		select {
		case <-in.done:
		default:
			_ = syscall.Kill(-in.cmd.Process.Pid, sig)
		}
	}
}

// terminate sends SIGTERM to the entrypoint process only (as the kubelet
// does to a container's main process).
func (in *instance) terminate() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil && in.cmd.Process != nil {
		_ = in.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// groupLeft lists the processes left in the entrypoint's process group.
func (in *instance) groupLeft() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.cmd.Process == nil {
		return nil
	}
	pgid := strconv.Itoa(in.cmd.Process.Pid)
	var left []string
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndex(s, ") ")
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+2:]) // state ppid pgrp ...
		if len(fields) > 2 && fields[2] == pgid {
			cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
			left = append(left, s[:i+1]+" "+fields[0]+" ppid "+fields[1]+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return left
}

// kill is a container kill: pg_ctl stop -m immediate for a running server
// (also one that pg_ctl started in a session of its own during bootstrap),
// then SIGKILL to whatever is left in the entrypoint's process group.
func (in *instance) kill() {
	if _, err := os.Stat(filepath.Join(in.pgdata, "postmaster.pid")); err == nil {
		_ = in.pgctl("stop", "-m", "immediate", "-w")
	}
	in.signal(syscall.SIGKILL)
	_ = in.waitExit(30 * time.Second)
}

// script runs one of the scripts with env, as the postgres user.
func (c *cluster) script(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := c.tl.command(ctx, c.root, env, c.tl.bashPath, append([]string{filepath.Join(c.scripts, name)}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// probe runs probe.sh MODE in the pod's container environment.
func (in *instance) probe(mode string) error {
	out, err := in.c.script(30*time.Second, in.env(), Probe, mode)
	if err != nil {
		return fmt.Errorf("probe %s: %w: %s", mode, err, out)
	}
	return nil
}

// waitReady polls probe.sh ready (as the kubelet would).
func (in *instance) waitReady(t *testing.T, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := in.probe("ready")
		if err == nil {
			return time.Since(start)
		}
		if !in.running() {
			t.Fatalf("%s: entrypoint exited before ready (%v): %v\n%s", in.pod, in.err, err, tail(in.lastLog(), 40))
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not ready after %v: %v\n%s", in.pod, timeout, err, tail(in.lastLog(), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitFor polls cond until it returns nil.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not after %v: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// psql runs SQL over TCP on 127.0.0.1:port as user with password.
func (c *cluster) psql(port int, user, password, db, sql string) (string, error) {
	return c.psqlConn(fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s", port, user, db), password, sql)
}

// psqlConn runs SQL with a libpq connection string and a password.
func (c *cluster) psqlConn(conn, password, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	env := append(c.tl.baseEnv(c.root), "PGPASSWORD="+password, "PGCONNECT_TIMEOUT=10")
	cmd := c.tl.command(ctx, c.root, env, filepath.Join(c.tl.bin, "psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", conn, "-c", sql)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("psql %s: %w: %s", conn, err, out)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// superSQL runs SQL as the superuser; fails the test on error.
func (c *cluster) superSQL(t *testing.T, in *instance, db, sql string) string {
	t.Helper()
	out, err := c.psql(in.port, c.su, c.secret(t, "superuser", "password"), db, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// appSQL runs SQL as the app role in its database; fails the test on error.
func (c *cluster) appSQL(t *testing.T, in *instance, sql string) string {
	t.Helper()
	out, err := c.psql(in.port, c.app, c.secret(t, "app", "password"), c.db, sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tableChecksums: table → "rows:md5 of all rows in order", for every user
// table of db.
func (c *cluster) tableChecksums(t *testing.T, in *instance, db string) map[string]string {
	t.Helper()
	tables := c.superSQL(t, in, db, `SELECT quote_ident(n.nspname)||'.'||quote_ident(c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r','p') AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%'
		ORDER BY 1`)
	out := map[string]string{}
	if tables == "" {
		return out
	}
	for _, table := range strings.Split(tables, "\n") {
		out[table] = c.superSQL(t, in, db, fmt.Sprintf(
			`SELECT count(*)||':'||coalesce(md5(string_agg(t::text, E'\n' ORDER BY t::text)), '') FROM %s t`, table))
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dirSize is the size of a directory tree in bytes.
func dirSize(path string) int64 {
	var size int64
	_ = filepath.Walk(path, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			size += info.Size()
		}
		return nil
	})
	return size
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// watchArgs samples the command line of every process on the machine until
// the returned stop is called, which returns the command lines that contained
// one of the secrets (none, if no script passes a password as an argument).
func watchArgs(secrets ...string) (stop func() []string) {
	done, finished := make(chan struct{}), make(chan struct{})
	var seen []string
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range paths {
				b, err := os.ReadFile(p)
				if err != nil {
					continue
				}
				for _, s := range secrets {
					if strings.Contains(string(b), s) {
						seen = append(seen, strings.ReplaceAll(string(b), "\x00", " "))
					}
				}
			}
		}
	}()
	return func() []string {
		close(done)
		<-finished
		return seen
	}
}
