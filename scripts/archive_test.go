package scripts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/example/function-database/internal/corrupt"
)

// The WAL archive on real pgBackRest (Debian's) and a real S3 server
// (versitygw's posix gateway, built by hack/tools.sh) over TLS with its own
// CA, on loopback. The instances run the function's own pgbackrest.conf
// (testdata/pgbackrest.conf, which the function's TestPgbackrestConf keeps
// equal to what it composes); pgBackRest's environment overrides only what
// differs on a test machine: the paths, the endpoint and the repository.

// s3Server is a running versitygw.
type s3Server struct {
	bin, dir, ca, cert, key string
	port                    int
	access, secret          string
	cmd                     *exec.Cmd
	log                     *os.File
}

// versitygw finds the server hack/tools.sh built.
func versitygw(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VERSITYGW"); p != "" {
		return p
	}
	cache := os.Getenv("FUNCTION_DATABASE_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "function-database")
	}
	p := filepath.Join(cache, "bin", "versitygw")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("FNDB_REQUIRE_TOOLS") != "" {
			t.Fatalf("versitygw not found at %s (hack/tools.sh versitygw builds it)", p)
		}
		t.Skipf("versitygw not found at %s (skipping; hack/tools.sh versitygw builds it)", p)
	}
	return p
}

// startS3 starts an S3 server on 127.0.0.1 over TLS, with one bucket.
// pgBackRest 2.45 checks the server's name against DNS names only (an IP
// SAN is ignored), so the endpoint is "localhost".
func startS3(t *testing.T, root string) *s3Server {
	t.Helper()
	if _, err := exec.LookPath("pgbackrest"); err != nil {
		missing(t, "pgbackrest not found")
	}
	s := &s3Server{bin: versitygw(t), dir: filepath.Join(root, "s3"), port: freePort(t), access: "fndbaccess", secret: "fndb-secret/key+1"}
	if err := os.MkdirAll(filepath.Join(s.dir, "data", "pg-archive"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.ca, s.cert, s.key = writeTLS(t, s.dir)
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

// start starts the server unless it runs already: a test that stops it
// defers a start for its failure paths, and starts it itself on the way
// that succeeds (a second server would overwrite s.cmd and outlive the
// test, which it did).
func (s *s3Server) start(t *testing.T) {
	t.Helper()
	if s.cmd != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "versitygw.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Absolute paths: the posix backend changes its working directory to
	// the data root.
	cmd := exec.Command(s.bin, "--port", "127.0.0.1:"+strconv.Itoa(s.port), "--cert", s.cert, "--key", s.key, "--quiet",
		"posix", filepath.Join(s.dir, "data"))
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.access, "ROOT_SECRET_KEY="+s.secret)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd, s.log = cmd, f
	waitFor(t, 30*time.Second, "versitygw listening", func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

func (s *s3Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.log.Close()
	s.cmd = nil
}

// writeTLS writes a CA and a server certificate for localhost signed by it.
func writeTLS(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fndb test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	for path, block := range map[string]*pem.Block{
		ca: {Type: "CERTIFICATE", Bytes: caDER}, cert: {Type: "CERTIFICATE", Bytes: srvDER}, key: {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key
}

// archived makes c's instances archive to s: the function's
// pgbackrest.conf and archive settings in the scripts folder, the bucket's
// keys in the object storage Secret's folder, and pgBackRest's environment
// for what differs on this machine. Call before the instances start.
func (c *cluster) archived(t *testing.T, s *s3Server, extra ...string) {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("testdata", "pgbackrest.conf"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(c.scripts, "pgbackrest.conf"), string(conf))
	writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), testTier+
		"archive_mode = 'on'\n"+
		"archive_command = 'bash "+filepath.Join(c.scripts, Archive)+" push %p'\n"+
		"archive_timeout = '60s'\n")
	c.objStore = c.tl.mkdir(t, filepath.Join(c.root, "secret-object-storage"))
	writeFile(t, filepath.Join(c.objStore, "AWS_ACCESS_KEY_ID"), s.access)
	writeFile(t, filepath.Join(c.objStore, "AWS_SECRET_ACCESS_KEY"), s.secret)
	c.archiveEnv = append([]string{
		"OBJECT_STORAGE_DIR=" + c.objStore,
		"PGBACKREST_REPO1_S3_ENDPOINT=localhost",
		"PGBACKREST_REPO1_STORAGE_PORT=" + strconv.Itoa(s.port),
		"PGBACKREST_REPO1_STORAGE_CA_FILE=" + s.ca,
		"PGBACKREST_REPO1_PATH=/test/" + c.name,
		"PGBACKREST_IO_TIMEOUT=10",
	}, extra...)
}

// archiveEnvOf is pgBackRest's environment for one instance: its paths.
func (in *instance) archiveEnvOf() []string {
	if in.c.archiveEnv == nil {
		return nil
	}
	return append(append([]string{}, in.c.archiveEnv...),
		"PGBACKREST_PG1_PATH="+in.pgdata,
		"PGBACKREST_PG1_PORT="+strconv.Itoa(in.port),
		"PGBACKREST_PG1_SOCKET_PATH="+in.sock,
		"PGBACKREST_SPOOL_PATH="+filepath.Join(in.dir, "data", "pgbackrest-spool"),
		"PGBACKREST_LOCK_PATH="+filepath.Join(in.state, "pgbackrest"),
	)
}

// archiveCheck runs archive-check.sh against in as the check CronJob's
// container would (the superuser over TCP), with its output.
func (c *cluster) archiveCheck(t *testing.T, in *instance) (string, error) {
	t.Helper()
	env := append(c.tl.baseEnv(c.root), "PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(in.port), "PGUSER="+c.su,
		"PGPASSWORD="+c.secret(t, "superuser", "password"), "DB_NAME="+c.db, "STUCK_SECONDS=120")
	return c.script(time.Minute, env, ArchiveCheck)
}

// archiver is pg_stat_archiver of a running instance: the last segment
// archived and the failures.
func (c *cluster) archiver(t *testing.T, in *instance) (last string, failed int) {
	t.Helper()
	row := c.superSQL(t, in, "postgres", "SELECT coalesce(last_archived_wal, ''), failed_count FROM pg_stat_archiver")
	parts := strings.SplitN(row, "|", 2)
	if len(parts) != 2 {
		t.Fatalf("pg_stat_archiver: %q", row)
	}
	n, _ := strconv.Atoi(parts[1])
	return parts[0], n
}

// switchAndWait closes the current WAL segment and waits until it is
// archived; it returns the segment's name and how long that took.
func (c *cluster) switchAndWait(t *testing.T, in *instance, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	seg := c.superSQL(t, in, "postgres", "SELECT pg_walfile_name(pg_switch_wal())")
	took := waitFor(t, timeout, "segment "+seg+" archived", func() error {
		if last, _ := c.archiver(t, in); last < seg {
			return fmt.Errorf("last archived %q", last)
		}
		return nil
	})
	return seg, took
}

// restoreInto runs pgbackrest restore (through pgbackrest.sh, as a restore
// would in a pod) into a new data directory, then starts that copy on its
// own port with pgbackrest.sh as its restore_command, and returns the port once
// the copy has recovered and promoted. target: "" for the latest point, or
// a time.
func (c *cluster) restoreInto(t *testing.T, in *instance, target string) (port int, took time.Duration) {
	t.Helper()
	dir := c.tl.mkdir(t, filepath.Join(c.root, fmt.Sprintf("restored-%d", time.Now().UnixNano())))
	data := filepath.Join(dir, "pgdata")
	args := []string{"--pg1-path=" + data, "--archive-mode=off",
		"--recovery-option=restore_command=bash " + filepath.Join(c.scripts, Archive) + " get %f \"%p\""}
	if target != "" {
		args = append(args, "--type=time", "--target="+target, "--target-action=promote")
	}
	start := time.Now()
	out, err := c.script(5*time.Minute, in.env(), Archive, append([]string{"--log-level-console=info", "restore"}, args...)...)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	port = freePort(t)
	sock := c.tl.mkdir(t, filepath.Join(dir, "run"))
	// The copy's own paths (archive-get writes relative to pg1-path).
	env := append(in.env(), "PGBACKREST_PG1_PATH="+data, "PGBACKREST_PG1_PORT="+strconv.Itoa(port), "PGBACKREST_PG1_SOCKET_PATH="+sock,
		"PGBACKREST_SPOOL_PATH="+filepath.Join(dir, "spool"), "PGBACKREST_LOCK_PATH="+filepath.Join(dir, "lock"))
	cmd := c.tl.command(t.Context(), dir, env, filepath.Join(c.tl.bin, "pg_ctl"), "-D", data, "-w", "-t", "120", "-l", filepath.Join(dir, "postgres.log"),
		"-o", fmt.Sprintf("-p %d -k %s -c cluster_name=restored -c listen_addresses=127.0.0.1", port, sock), "start")
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		t.Fatalf("starting the restored copy: %v\n%s\n%s", err, out, tail(string(log), 30))
	}
	t.Cleanup(func() {
		stop := c.tl.command(t.Context(), dir, env, filepath.Join(c.tl.bin, "pg_ctl"), "-D", data, "-m", "immediate", "stop")
		_ = stop.Run()
	})
	waitFor(t, 2*time.Minute, "the restored copy promoted", func() error {
		out, err := c.psql(port, c.su, c.secret(t, "superuser", "password"), "postgres", "SELECT pg_is_in_recovery()")
		if err != nil {
			return err
		}
		if out != "f" {
			return errors.New("still in recovery")
		}
		return nil
	})
	return port, time.Since(start)
}

// restoreToEnd: a new Database (cluster name) restored by its entrypoint
// from c's archive to its end; its report.
func restoreToEnd(t *testing.T, tl *tools, root string, s3 *s3Server, c *cluster, name string) RestoreReport {
	t.Helper()
	cp := newCluster(t, tl, root, name)
	cp.archived(t, s3)
	writeFile(t, filepath.Join(cp.scripts, "restore-repo"), "/test/"+c.name)
	writeFile(t, filepath.Join(cp.scripts, "restore-source"), c.db)
	in := cp.instance(0)
	in.start(t)
	return in.restoreReport(t, 3*time.Minute)
}

// restoreReport waits for the entrypoint to exit after a restore, as it
// must, and reads its report.
func (in *instance) restoreReport(t *testing.T, timeout time.Duration) RestoreReport {
	t.Helper()
	if err := in.waitExit(timeout); err != nil {
		t.Fatalf("%v: a restoring entrypoint exits once restored\n%s", err, tail(in.lastLog(), 40))
	}
	in.mu.Lock()
	err := in.err
	in.mu.Unlock()
	if err != nil {
		t.Fatalf("%s: the restoring entrypoint exited with %v\n%s", in.pod, err, tail(in.lastLog(), 40))
	}
	b, err := os.ReadFile(in.terminationLog())
	if err != nil {
		t.Fatalf("no report: %v\n%s", err, tail(in.lastLog(), 40))
	}
	r, err := DecodeReport[RestoreReport](b)
	if err != nil {
		t.Fatalf("report %q: %v", b, err)
	}
	return r
}

// waitClockPast waits until the instance's clock is in a later whole second
// than after: a condition on the clock itself, not a sleep.
func (c *cluster) waitClockPast(t *testing.T, in *instance, after time.Time) {
	t.Helper()
	waitFor(t, 10*time.Second, "the clock past "+after.Format(time.RFC3339Nano), func() error {
		out := c.superSQL(t, in, "postgres", "SELECT extract(epoch FROM date_trunc('second', clock_timestamp()))::bigint")
		sec, err := strconv.ParseInt(out, 10, 64)
		if err != nil {
			return err
		}
		if sec <= after.Unix() {
			return fmt.Errorf("clock at second %d", sec)
		}
		return nil
	})
}

// archivingPrimary starts c's ordinal 0 and its sidecar, and waits for the
// sidecar's stanza and first full backup; it returns the instance, the
// sidecar and how long that backup took.
func (c *cluster) archivingPrimary(t *testing.T) (*instance, *sidecar, time.Duration) {
	t.Helper()
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 2*time.Minute)
	side := startSidecar(t, c, p)
	return p, side, c.firstBackup(t, side)
}

// firstBackup waits for the sidecar's stanza and first full backup.
func (c *cluster) firstBackup(t *testing.T, side *sidecar) time.Duration {
	t.Helper()
	return waitFor(t, 3*time.Minute, "the sidecar's first backup", func() error {
		return containsErr(side.log(), "archive: stanza ready and the repository holds a backup")
	})
}

func TestArchive(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	s3 := startS3(t, root)

	t.Run("a primary archives, and its first backup makes the archive restorable to a point in time", func(t *testing.T) {
		c := newCluster(t, tl, root, "pitr")
		c.archived(t, s3)
		p, _, took := c.archivingPrimary(t)
		t.Logf("stanza and first full backup: %v", took.Round(time.Millisecond))
		backupDone := time.Now()
		// Before the stanza exists, pushes fail (postgres retries them);
		// from then on, none may.
		_, failedBefore := c.archiver(t, p)

		c.appSQL(t, p, "CREATE TABLE t (id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
		c.appSQL(t, p, "INSERT INTO t (id) SELECT generate_series(1, 100)")
		// pgBackRest picks the backup to restore by its stop time in whole
		// seconds and wants it strictly before the target's second: a target
		// in the second the backup ended finds no backup set (error 075, seen
		// in CI). So the target is taken once the clock has left that second.
		c.waitClockPast(t, p, backupDone)
		// The target: after the first 100 rows' commit, before the next.
		target := c.superSQL(t, p, "postgres", "SELECT clock_timestamp()")
		c.appSQL(t, p, "INSERT INTO t (id) SELECT generate_series(101, 150)")
		seg, took := c.switchAndWait(t, p, time.Minute)
		t.Logf("segment %s archived %v after the switch", seg, took.Round(time.Millisecond))
		if _, failed := c.archiver(t, p); failed != failedBefore {
			t.Errorf("%d archive_command failures after the stanza was created", failed-failedBefore)
		}

		if out, err := c.archiveCheck(t, p); err != nil || !strings.Contains(out, "the archive keeps up") {
			t.Errorf("archive-check.sh on an archiving primary: %v\n%s", err, out)
		}

		port, took := c.restoreInto(t, p, target)
		t.Logf("restore to %s, recovery and promotion: %v", target, took.Round(time.Millisecond))
		got, err := c.psql(port, c.su, c.secret(t, "superuser", "password"), c.db, "SELECT count(*), max(id) FROM t")
		if err != nil {
			t.Fatal(err)
		}
		if got != "100|100" {
			t.Errorf("restored to %s: count|max = %s, want 100|100 (every row committed before the target, none after)", target, got)
		}

		// A new Database restored from this one's archive by its own
		// entrypoint (spec.restoreFrom source Archive): the rows before the
		// target, under its own names and passwords, archiving to its own
		// repository.
		cp := newCluster(t, tl, root, "pitr-copy")
		cp.archived(t, s3)
		// A smaller size than the source's: fewer connections than the
		// WAL it replays was written with.
		conf := filepath.Join(cp.scripts, "postgresql.conf")
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, conf, strings.Replace(string(b), "max_connections = 40", "max_connections = 20", 1))
		writeFile(t, filepath.Join(cp.scripts, "restore-repo"), "/test/pitr")
		writeFile(t, filepath.Join(cp.scripts, "restore-source"), c.db)
		writeFile(t, filepath.Join(cp.scripts, "restore-target"), target)
		cq := cp.instance(0)
		start := time.Now()
		cq.start(t)
		// Restored, the entrypoint exits once with its report (the pod's
		// termination message); the kubelet's restart is the next start.
		rep := cq.restoreReport(t, 3*time.Minute)
		t.Logf("restored in %v: %+v", time.Since(start).Round(time.Millisecond), rep)
		cq.start(t)
		cq.waitReady(t, 3*time.Minute)
		t.Logf("a new Database restored to %s and ready in %v", target, time.Since(start).Round(time.Millisecond))
		if got := cp.appSQL(t, cq, "SELECT count(*), max(id) FROM t"); got != "100|100" {
			t.Errorf("the restored Database %s has count|max %s, want 100|100", cp.db, got)
		}
		// The report names the last transaction replayed: the first 100
		// rows' commit, after their clock_timestamp() and before the target.
		inserted := cp.appSQL(t, cq, "SELECT to_char(max(at) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') FROM t")
		lo, err1 := time.Parse(time.RFC3339Nano, inserted)
		hi, err2 := time.Parse("2006-01-02 15:04:05.999999-07", target)
		reached, err3 := time.Parse(time.RFC3339Nano, rep.RestoredTo)
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Errorf("report %+v: %v", rep, err)
		} else if reached.Before(lo) || reached.After(hi) {
			t.Errorf("restoredTo %s, want the first rows' commit: after %s, not after the target %s", rep.RestoredTo, lo, hi)
		}
		if rep.Result != "restored" || rep.Source != c.db || rep.Timeline != 2 || rep.LSN == "" {
			t.Errorf("report %+v: want result restored, source %s, timeline 2, an LSN", rep, c.db)
		}
		if got := cp.superSQL(t, cq, "postgres", "SELECT current_setting('recovery_target_time') || '|' || current_setting('restore_command')"); got != "|" {
			t.Errorf("the restored primary keeps recovery settings %q: a standby cloned from it would stop at the target", got)
		}
		cp.firstBackup(t, startSidecar(t, cp, cq))
		seg, took = cp.switchAndWait(t, cq, time.Minute)
		t.Logf("the copy archives to its own repository: %s %v after the switch (%v after its start)", seg, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	})

	t.Run("full-backup.sh asks the primary's sidecar for a full backup and ends with its answer", func(t *testing.T) {
		c := newCluster(t, tl, root, "full")
		c.archived(t, s3, "ARCHIVE_RETRY_SECONDS=2")
		p, _, _ := c.archivingPrimary(t)
		c.appSQL(t, p, "CREATE TABLE t AS SELECT generate_series(1, 1000) AS id")
		// The CronJob's container: the superuser over TCP, as through the
		// rw Service; its pod's name is the request.
		job := func(pod string) (string, error) {
			env := append(c.tl.baseEnv(c.root), "PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(p.port), "PGUSER="+c.su,
				"PGPASSWORD="+c.secret(t, "superuser", "password"), "DB_NAME="+c.db, "POD_NAME="+pod, "POLL_SECONDS=1")
			return c.script(3*time.Minute, env, FullBackup)
		}
		fulls := func() []string {
			out, err := c.script(time.Minute, p.env(), Archive, "info")
			if err != nil {
				t.Fatalf("pgbackrest info: %v\n%s", err, out)
			}
			var labels []string
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[0] == "full" && f[1] == "backup:" {
					labels = append(labels, f[2])
				}
			}
			return labels
		}
		start := time.Now()
		out, err := job("full-backup-29000000-abcde")
		if err != nil || !strings.Contains(out, "the primary took the full backup") {
			t.Fatalf("full-backup.sh: %v\n%s", err, out)
		}
		t.Logf("a full backup on request, answered in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
		labels := fulls()
		if len(labels) != 2 || !strings.Contains(out, labels[1]) {
			t.Fatalf("full backups in the repository %v, want the first and the requested one, named in the answer", labels)
		}
		// The same request again (the pod restarted in place): answered
		// from the record, no backup taken.
		if out, err := job("full-backup-29000000-abcde"); err != nil {
			t.Fatalf("the same request again: %v\n%s", err, out)
		}
		if got := fulls(); len(got) != 2 {
			t.Errorf("full backups %v after a request already answered, want still %v", got, labels)
		}
		// The request and the answer are in the primary's data directory,
		// never in a backup: a copy restored from one would take them up.
		// The manifest lists every file (most live in bundles).
		ls, err := c.script(time.Minute, p.env(), Archive, "repo-get", "backup/db/"+labels[1]+"/backup.manifest")
		if err != nil || !strings.Contains(ls, "pg_data/PG_VERSION=") {
			t.Fatalf("the manifest of %s: %v\n%s", labels[1], err, ls)
		}
		if strings.Contains(ls, "database.full-backup") {
			t.Errorf("backup %s holds the request or the answer:\n%s", labels[1], ls)
		}
		// A failed backup is the Job's failure, with pgBackRest's reason:
		// the bucket refuses a wrong key.
		keyFile := filepath.Join(c.objStore, "AWS_SECRET_ACCESS_KEY")
		writeFile(t, keyFile, "wrong")
		out, err = job("full-backup-29000001-fghij")
		writeFile(t, keyFile, s3.secret)
		if err == nil || !strings.Contains(out, "the full backup failed on the primary") || !strings.Contains(out, "pgBackRest exited") {
			t.Fatalf("full-backup.sh with a bucket that refuses the key: %v, want a failure with pgBackRest's reason\n%s", err, out)
		}
		t.Logf("refused: %s", strings.TrimSpace(out))
		// Its Job's next attempt (a new pod) asks anew, and succeeds.
		if out, err := job("full-backup-29000001-klmno"); err != nil {
			t.Fatalf("the next attempt: %v\n%s", err, out)
		}
		if got := fulls(); len(got) != 3 {
			t.Errorf("full backups %v after the next attempt, want three", got)
		}
	})

	t.Run("the archive follows a promoted standby onto its timeline", func(t *testing.T) {
		c := newCluster(t, tl, root, "follow")
		c.archived(t, s3)
		p, s := c.instance(0), c.instance(1)
		p.start(t)
		p.waitReady(t, 2*time.Minute)
		side := startSidecar(t, c, p)
		s.start(t)
		s.waitReady(t, 2*time.Minute)
		c.firstBackup(t, side)
		c.appSQL(t, p, "CREATE TABLE t (id int PRIMARY KEY)")
		c.appSQL(t, p, "INSERT INTO t SELECT generate_series(1, 10)")
		c.switchAndWait(t, p, time.Minute)
		// The primary lost; the standby promoted (as failover.sh does).
		p.kill()
		if err := s.pgctl("promote", "-w"); err != nil {
			t.Fatal(err)
		}
		c.appSQL(t, s, "INSERT INTO t SELECT generate_series(11, 20)")
		seg, took := c.switchAndWait(t, s, 2*time.Minute)
		if !strings.HasPrefix(seg, "00000002") {
			t.Errorf("the promoted standby archived %s, want a segment of timeline 2", seg)
		}
		t.Logf("the promoted standby archived %s %v after the switch", seg, took.Round(time.Millisecond))
		// The archive restores to the latest point: the rows written on
		// the new timeline too.
		port, _ := c.restoreInto(t, s, "")
		got, err := c.psql(port, c.su, c.secret(t, "superuser", "password"), c.db, "SELECT count(*) FROM t")
		if err != nil {
			t.Fatal(err)
		}
		if got != "20" {
			t.Errorf("restored to the latest point: %s rows, want 20", got)
		}
	})

	t.Run("an unreachable bucket neither stops writes nor fills pg_wal; archiving resumes and a full backup closes the gap", func(t *testing.T) {
		c := newCluster(t, tl, root, "unreachable")
		// A queue of 64 MiB: four segments past it, pgBackRest drops WAL.
		c.archived(t, s3, "PGBACKREST_ARCHIVE_PUSH_QUEUE_MAX=64MiB", "ARCHIVE_RETRY_SECONDS=5")
		p, side, _ := c.archivingPrimary(t)
		s3.stop()
		defer s3.start(t)
		c.appSQL(t, p, "CREATE TABLE big (id int, pad text)")
		// The check fails once an attempt failed after the last success.
		c.superSQL(t, p, "postgres", "SELECT pg_switch_wal()")
		waitFor(t, 3*time.Minute, "archive-check.sh failing with the bucket down", func() error {
			out, err := c.archiveCheck(t, p)
			if err == nil {
				return errors.New("it passes: " + out)
			}
			return containsErr(out, "archiving fails")
		})
		walDir := filepath.Join(p.pgdata, "pg_wal")
		peak := int64(0)
		for i := range 30 {
			c.appSQL(t, p, fmt.Sprintf("INSERT INTO big SELECT g, repeat(md5(g::text), 40) FROM generate_series(%d, %d) g", i*10000, i*10000+9999))
			c.superSQL(t, p, "postgres", "SELECT pg_switch_wal()")
			peak = max(peak, dirSize(walDir))
		}
		written := c.superSQL(t, p, "postgres", "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
		t.Logf("wrote %s bytes of WAL with the bucket down; pg_wal reached %s while writing", written, mb(peak))
		// The bound: pgBackRest's asynchronous push, failing to reach the
		// bucket, drops what is past its queue (acknowledging it to
		// postgres, which then recycles it at a checkpoint). It acts when
		// its next run starts, so the WAL written meanwhile waits: the
		// bound holds within a bounded time, not at every instant.
		limit := int64(256+64+32) << 20 // max_wal_size in testTier, the queue, a segment in flight
		took := waitFor(t, 3*time.Minute, "pg_wal back within "+mb(limit), func() error {
			c.superSQL(t, p, "postgres", "CHECKPOINT")
			if n := dirSize(walDir); n > limit {
				return fmt.Errorf("pg_wal holds %s", mb(n))
			}
			return containsErr(p.logs(), "dropped WAL file")
		})
		t.Logf("pg_wal within %s %v after the writes, segments past the queue dropped", mb(limit), took.Round(time.Millisecond))
		// The archive has a gap: the check says so (a restore would stop
		// at the gap), not just that pushes fail.
		if out, err := c.archiveCheck(t, p); err == nil || !strings.Contains(out, "the archive has a gap") {
			t.Errorf("archive-check.sh after dropped WAL: %v, want a failure naming the gap\n%s", err, out)
		}
		s3.start(t)
		returned := time.Now()
		seg, took := c.switchAndWait(t, p, 3*time.Minute)
		t.Logf("archiving resumed: %s archived %v after the bucket returned", seg, took.Round(time.Millisecond))
		// The sidecar takes a full backup, the start of a chain a restore
		// replays to the end; the check passes again.
		waitFor(t, 3*time.Minute, "the sidecar's full backup after the gap", func() error {
			return containsErr(side.log(), "the archive is restorable to its end again")
		})
		if out, err := c.archiveCheck(t, p); err != nil {
			t.Errorf("archive-check.sh after the new full backup: %v\n%s", err, out)
		}
		t.Logf("the gap closed by a full backup %v after the bucket returned", time.Since(returned).Round(time.Millisecond))
		c.appSQL(t, p, "INSERT INTO big VALUES (-1, 'after the gap')")
		c.switchAndWait(t, p, time.Minute)
		port, _ := c.restoreInto(t, p, "")
		if got, err := c.psql(port, c.su, c.secret(t, "superuser", "password"), c.db, "SELECT count(*) FROM big WHERE id = -1"); err != nil || got != "1" {
			t.Errorf("a restore to the latest point after the gap: %v %q, want the row written after it", err, got)
		}
	})
}

// drill runs drill.sh as the drill CronJob's container would, against c's
// repository: its own data directory, socket and port; in's pgBackRest
// environment (the repository). It returns the termination message, parsed,
// and the output.
func (c *cluster) drill(t *testing.T, in *instance) (DrillVerdict, string, error) {
	t.Helper()
	dir := c.tl.mkdir(t, filepath.Join(c.root, fmt.Sprintf("drill-%d", time.Now().UnixNano())))
	term := filepath.Join(dir, "termination-log")
	data := filepath.Join(dir, "pgdata")
	env := in.env("PGDATA="+data, "PGHOST="+filepath.Join(dir, "run"), "PGPORT="+strconv.Itoa(freePort(t)), "PGUSER="+c.su,
		"TERMINATION_LOG="+term, "RECOVERY_TIMEOUT_SECONDS=180",
		"PGBACKREST_SPOOL_PATH="+filepath.Join(dir, "spool"), "PGBACKREST_LOCK_PATH="+filepath.Join(dir, "lock"))
	out, err := c.script(5*time.Minute, env, Drill)
	// The copy never outlives the drill.
	if _, statErr := os.Stat(filepath.Join(data, "postmaster.pid")); statErr == nil {
		t.Errorf("the drill left its copy running in %s", data)
	}
	var v DrillVerdict
	b, rerr := os.ReadFile(term)
	if rerr == nil {
		v, rerr = DecodeReport[DrillVerdict](b)
	}
	if rerr != nil {
		t.Errorf("drill.sh wrote no termination message (%v): %q\n%s", rerr, b, out)
	}
	return v, out, err
}

func TestDrill(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	s3 := startS3(t, root)
	c := newCluster(t, tl, root, "drill")
	c.archived(t, s3)
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 2*time.Minute)

	// Before the first backup: nothing to verify, and no failure.
	// pgBackRest exits 50 (LockAcquireError) while postgres's archiver
	// holds the stanza's lock, retrying its first push (which fails until
	// the stanza exists): seen in a run; try again, as the sidecar would.
	waitFor(t, time.Minute, "stanza-create", func() error {
		out, err := c.script(time.Minute, p.env(), Archive, "--log-level-console=info", "stanza-create")
		if err != nil && exitCode(err) != 50 {
			t.Fatalf("stanza-create: %v\n%s", err, out)
		}
		return err
	})
	if v, out, err := c.drill(t, p); err != nil || v.Result != "nobackup" {
		t.Fatalf("drill with no backup: %v %+v\n%s", err, v, out)
	}

	c.firstBackup(t, startSidecar(t, c, p))
	c.appSQL(t, p, "CREATE TABLE t (id int PRIMARY KEY, pad text)")
	c.appSQL(t, p, "INSERT INTO t SELECT g, md5(g::text) FROM generate_series(1, 5000) g")
	c.appSQL(t, p, "CREATE TABLE \"odd|name\" (x int)")
	c.appSQL(t, p, "INSERT INTO \"odd|name\" VALUES (1), (2)")
	last := c.superSQL(t, p, "postgres", `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`)
	c.switchAndWait(t, p, time.Minute)
	want := c.appSQL(t, p, "SELECT count(*) FROM t")

	v, out, err := c.drill(t, p)
	if err != nil || v.Result != "verified" {
		t.Fatalf("drill: %v %+v\n%s", err, v, out)
	}
	t.Logf("drill: %+v", v)
	if v.Tables != 2 || v.Rows != 5002 {
		t.Errorf("the drill read %d tables and %d rows, want 2 and 5002 (t has %s)", v.Tables, v.Rows, want)
	}
	// The copy replayed the archive past the first backup, to the last
	// commit archived.
	if v.RestoredTo < last[:len("2006-01-02T15:04")] {
		t.Errorf("restored to %q, want the archive's end (the last insert at %s)", v.RestoredTo, last)
	}
	// The same data, the same checksum; other data, another.
	v2, out, err := c.drill(t, p)
	if err != nil || v2.Checksum != v.Checksum {
		t.Errorf("a second drill of the same archive: %v, checksum %s, want %s\n%s", err, v2.Checksum, v.Checksum, out)
	}
	c.appSQL(t, p, "UPDATE t SET pad = 'changed' WHERE id = 7")
	c.switchAndWait(t, p, time.Minute)
	if v3, out, err := c.drill(t, p); err != nil || v3.Checksum == v.Checksum {
		t.Errorf("a drill after an update: %v, checksum %s unchanged\n%s", err, v3.Checksum, out)
	}
	// Restored to the end of the whole archive: no gap.
	if rep := restoreToEnd(t, tl, root, s3, c, "end-copy"); rep.Gap() || rep.ArchiveEnd == "" || rep.StoppedIn == "" {
		t.Errorf("restore to the end of a whole archive: report %+v, want the archive's end and no gap", rep)
	}

	// A segment missing in the archive, after the backup: the replay
	// stops before the archive's end, and the drill fails naming the gap.
	c.appSQL(t, p, "INSERT INTO t VALUES (6000, 'a')")
	missing, _ := c.switchAndWait(t, p, time.Minute)
	c.appSQL(t, p, "INSERT INTO t VALUES (6001, 'b')")
	c.switchAndWait(t, p, time.Minute)
	segs, _ := filepath.Glob(filepath.Join(s3.dir, "data", "pg-archive", "test", c.name, "archive", "db", "*", missing[:16], missing+"-*"))
	if len(segs) != 1 {
		t.Fatalf("segment %s in the bucket: %v", missing, segs)
	}
	moved := segs[0] + ".aside"
	if err := os.Rename(segs[0], moved); err != nil {
		t.Fatal(err)
	}
	if g, out, err := c.drill(t, p); err == nil || g.Result != "failed" || !strings.Contains(g.Reason, "the archive has a gap") {
		t.Errorf("drill of an archive missing %s: %v %+v, want failed naming the gap\n%s", missing, err, g, out)
	} else {
		t.Logf("the drill of an archive with a gap: %s", g.Reason)
	}
	// A new Database restored to the end of that archive stops at the gap
	// too; its report says where, and the archive's end.
	if rep := restoreToEnd(t, tl, root, s3, c, "gap-copy"); !rep.Gap() || rep.StoppedIn[8:] != missing[8:] {
		t.Errorf("restore to the end of an archive missing %s: report %+v, want stopped in it, before the archive's end", missing, rep)
	} else {
		t.Logf("restored to the end of an archive with a gap: stopped in %s, the archive held up to %s", rep.StoppedIn, rep.ArchiveEnd)
	}
	if err := os.Rename(moved, segs[0]); err != nil {
		t.Fatal(err)
	}

	// Nothing of the drill reached the repository: no timeline of its own.
	if h, _ := filepath.Glob(filepath.Join(s3.dir, "data", "pg-archive", "test", c.name, "archive", "db", "*", "*.history")); len(h) > 0 {
		t.Errorf("the drill's copy archived its promotion: %v", h)
	}

	// A corrupted backup: 4 KiB changed in the biggest file (a bundle) of the newest backup
	// in the bucket. The drill fails, saying which backup.
	biggest, size, err := corrupt.Backup(filepath.Join(s3.dir, "data", "pg-archive", "test", c.name, "backup", "db", v.Backup))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("corrupted %s (%d bytes)", biggest, size)
	bad, out, err := c.drill(t, p)
	if err == nil || bad.Result != "failed" || bad.Backup != v.Backup || bad.Reason == "" {
		t.Errorf("drill of a corrupted backup: %v %+v, want failed naming %s\n%s", err, bad, v.Backup, out)
	}
	t.Logf("the corrupted backup's drill: %s", bad.Reason)
}
