//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/example/function-database/e2e/internal/cluster"
	"github.com/example/function-database/e2e/internal/kube"
	"github.com/example/function-database/e2e/internal/pki"
	"github.com/example/function-database/e2e/internal/proc"
	"github.com/example/function-database/e2e/internal/writer"
	"github.com/example/function-database/internal/checker"
	"github.com/example/function-database/internal/corrupt"
)

// The WAL archive in object storage on real pods (docs/backups.md): a real
// S3 server (versitygw's posix gateway, built by hack/tools.sh) on this
// machine over TLS with a CA of its own, reached by the pods as
// s3.storage.svc.cluster.local through a Service, as a platform's in-cluster
// object storage would be; the platform's Secret in its own namespace, read
// by Crossplane with its real permissions and copied beside each Database.

const (
	archivedComposition = "database-real-archived"
	// drilledComposition archives as archivedComposition does, with a
	// restore drill every minute.
	drilledComposition = "database-real-drilled"
	s3Namespace        = "storage"
	s3Service          = "s3"
	s3Bucket           = "pg-archive"
	s3SecretNamespace  = "platform-secrets"
	s3SecretName       = "pg-archive"
)

// objectStore is the running S3 server and where its bucket is on disk.
type objectStore struct {
	bucketDir string
	host      string // the S3 endpoint's name, as the pods reach it
	proc      *proc.Proc
}

// archiveInput sets the function input's objectStorage to this store, with
// the drill given: what the archived Compositions of TestBackups and the
// pool's of TestNodes share.
func (o *objectStore) archiveInput(drill map[string]any) func(map[string]any) {
	return func(input map[string]any) {
		input["objectStorage"] = map[string]any{
			"endpoint": o.host + ":443", "bucket": s3Bucket, "uriStyle": "Path",
			"secretRef":             map[string]any{"name": s3SecretName, "namespace": s3SecretNamespace},
			"archiveTimeoutSeconds": int64(10),
			// A failing archive is a condition within a minute.
			"checkMinutes": int64(1),
			"drill":        drill,
			// backups-copy may restore backups-real's archives.
			"crossNamespaceRestores": []any{map[string]any{"from": backupsNamespace, "to": backupsCopyNamespace}},
		}
	}
}

// objectStorage starts the S3 server and the Composition that archives to
// it, once per suite.
func (s *suite) objectStorage(t *testing.T) *objectStore {
	t.Helper()
	if err := s.s3Started.do(func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s.s3, err = s.startObjectStorage(ctx)
		return err
	}); err != nil {
		t.Fatalf("object storage: %v", err)
	}
	return s.s3
}

func (s *suite) startObjectStorage(ctx context.Context) (*objectStore, error) {
	dir := filepath.Join(s.dir, "s3")
	o := &objectStore{bucketDir: filepath.Join(dir, "data", s3Bucket)}
	if err := os.MkdirAll(o.bucketDir, 0o755); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("function-database e2e object storage CA")
	if err != nil {
		return nil, err
	}
	host := s3Service + "." + s3Namespace + ".svc.cluster.local"
	o.host = host
	// pgBackRest checks DNS names only (an IP SAN is ignored).
	certPEM, keyPEM, err := ca.Issue(pki.CertSpec{CommonName: host, DNSNames: []string{host}, Server: true})
	if err != nil {
		return nil, err
	}
	cert, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(cert, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	const access, secret = "e2e-archive", "e2e-archive-secret/key"
	// On the bridge address, as CoreDNS and the API server's forwarder:
	// on this machine only, reached by the pods through a Service.
	o.proc = proc.New(s.dir, "versitygw", s.cl.Binary("versitygw"),
		"--port", cluster.BridgeIP+":"+strconv.Itoa(port), "--cert", cert, "--key", key, "--quiet", "posix", filepath.Join(dir, "data"))
	o.proc.Env = []string{"ROOT_ACCESS_KEY=" + access, "ROOT_SECRET_KEY=" + secret}
	if err := o.proc.Start(); err != nil {
		return nil, err
	}
	if err := cluster.Retry(ctx, 30*time.Second, func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(cluster.BridgeIP, strconv.Itoa(port)), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		return nil, fmt.Errorf("versitygw not listening: %w\n%s", err, proc.TailFile(o.proc.Log, 20))
	}
	cs := s.k.CS
	for _, ns := range []string{s3Namespace, s3SecretNamespace} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: s3Service, Namespace: s3Namespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(port), Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := cs.CoreV1().Services(s3Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: s3Service, Namespace: s3Namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: s3Service, discoveryv1.LabelManagedBy: "function-database-e2e"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{cluster.BridgeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(s3Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s3SecretName, Namespace: s3SecretNamespace},
		Data:       map[string][]byte{"AWS_ACCESS_KEY_ID": []byte(access), "AWS_SECRET_ACCESS_KEY": []byte(secret), "ca.crt": ca.CertPEM},
	}
	if _, err := cs.CoreV1().Secrets(s3SecretNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	// The archived Databases drill only when asked (a drill of their own
	// would compete for the node's two cores with the faults they test).
	if err := s.applyComposition(ctx, archivedComposition, o.archiveInput(map[string]any{"enabled": false})); err != nil {
		return o, err
	}
	return o, s.applyComposition(ctx, drilledComposition, o.archiveInput(map[string]any{"schedule": "* * * * *"}))
}

// repository is where a Database's pgBackRest repository is in the bucket.
func (o *objectStore) repository(ns, db string) string {
	return filepath.Join(o.bucketDir, "function-database", ns, db)
}

// archivedSegment is the file of WAL segment seg in a repository, or "".
func (o *objectStore) archivedSegment(ns, db, seg string) string {
	matches, _ := filepath.Glob(filepath.Join(o.repository(ns, db), "archive", "db", "*", seg[:16], seg+"-*"))
	if len(matches) == 0 {
		return ""
	}
	return matches[0]
}

// The namespaces of TestBackups: the archived Databases', and the one the
// platform's input lets restore their archives.
const (
	backupsNamespace     = "backups-real"
	backupsCopyNamespace = "backups-copy"
)

// crossNamespace: a Database of another namespace restores the archive of
// ledger to its end, where the platform's input allows it (backups-copy):
// every row the source archived, under the same name; the same Database in
// a namespace no rule admits is refused (Synced False naming the input's
// rule) and nothing is composed for it.
func (s *suite) crossNamespace(t *testing.T, store *objectStore, src database, ns, db string) {
	ctx := context.Background()
	primary := str(src.get(t), "status", "primary")
	want := s.appDB(t, ns, primary, db, "SELECT count(*), max(id) FROM marks")
	seg := s.superSQL(ns, primary, "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 2*time.Minute, "segment "+seg+" in the bucket", func() (bool, string) {
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, primary, "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})
	restore := map[string]any{"restoreFrom": map[string]any{"database": db, "namespace": ns, "from": "Archive"}}
	realArchived := func(ns string) *unstructured.Unstructured {
		u := realDatabase(t, ns, db, "small", restore)
		if err := unstructured.SetNestedField(u.Object, archivedComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
			t.Fatal(err)
		}
		return u
	}

	s.realNamespace(t, backupsCopyNamespace)
	start := time.Now()
	cp := s.create(t, realArchived(backupsCopyNamespace))
	defer func() { _ = s.k.Delete(context.Background(), cp.gvk, cp.ns, cp.name) }()
	s.waitRealReady(t, cp)
	t.Logf("%s/%s restored the archive of %s/%s and is ready in %s", cp.ns, cp.name, ns, db, time.Since(start).Round(time.Second))
	if got := s.appDB(t, cp.ns, db+"-0", db, "SELECT count(*), max(id) FROM marks"); got != want {
		t.Errorf("the copy has count|max %s of marks, want the source's %s", got, want)
	}
	if got := str(cp.get(t), "status", "restore", "namespace"); got != ns {
		t.Errorf("status.restore.namespace %q, want %q", got, ns)
	}

	const denied = "backups-denied"
	s.realNamespace(t, denied)
	dn := s.create(t, realArchived(denied))
	defer func() { _ = s.k.Delete(context.Background(), dn.gvk, dn.ns, dn.name) }()
	eventually(t, 2*time.Minute, "the restore into "+denied+" refused", func() (bool, string) {
		c := kube.GetCondition(dn.get(t), "Synced")
		return c.Status == "False" && strings.Contains(c.Message, "crossNamespaceRestores"), c.Status + " " + c.Reason + ": " + c.Message
	})
	if _, err := s.k.CS.AppsV1().StatefulSets(denied).Get(ctx, db, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a StatefulSet composed for a refused restore: %v", err)
	}
	t.Logf("%s/%s refused: %s", denied, db, kube.GetCondition(dn.get(t), "Synced").Message)
}

func TestBackups(t *testing.T) {
	s := env
	s.realNode(t)
	store := s.objectStorage(t)
	const ns, db = backupsNamespace, "ledger"
	s.realNamespace(t, ns)
	// d is set as soon as the Database exists, so that a failed first step
	// removes it too: left behind (CI of 1ade2d9), its instances held the
	// real node's CPU and TestOperate's fleet could not be scheduled.
	var d database
	defer func() {
		if d.name != "" {
			s.removeDatabases(t, d)
		}
	}()
	// Each step builds on the one before it (the Database, its archive).
	s.steps(t, []step{
		{name: "ArchiveFollowsFailover", needed: true, run: func(t *testing.T) { s.archiveFollowsFailover(t, store, ns, db, &d) }},
		{name: "PointInTime", needed: true, run: func(t *testing.T) { s.pointInTime(t, store, d, ns, db) }},
		{name: "CrossNamespace", needed: true, run: func(t *testing.T) { s.crossNamespace(t, store, d, ns, db) }},
		{name: "BucketUnreachable", needed: true, run: func(t *testing.T) {
			// Its 9 minutes are mostly 1.4 GB of WAL written to pass the
			// volume's bound, not the condition's threshold.
			fullMatrix(t, "scripts' TestArchive (an unreachable bucket neither stops writes nor fills pg_wal; archiving resumes and a full backup closes the gap: real PostgreSQL, real S3) and the function's WALArchive tests (archive_test.go)")
			s.bucketUnreachable(t, store, d, ns, db)
		}},
		{name: "AllInstancesLost", needed: true, run: func(t *testing.T) { s.allInstancesLost(t, d, ns, db) }},
		{name: "Drill", run: func(t *testing.T) { s.drill(t, store, ns) }},
	})
}

// drill: a Database whose Composition drills every minute; the drill
// restores its newest backup and the archive after it in a pod of its own,
// checks it, and BackupVerified says so with the rows read; a byte changed
// in that backup in the bucket makes the next drill fail, and the
// condition False naming the backup.
func (s *suite) drill(t *testing.T, store *objectStore, ns string) {
	const db = "vault"
	u := realDatabase(t, ns, db, "small", nil)
	if err := unstructured.SetNestedField(u.Object, drilledComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	d := s.create(t, u)
	defer func() { _ = s.k.Delete(context.Background(), d.gvk, d.ns, d.name) }()
	start := time.Now()
	s.waitRealReady(t, d)
	s.appDB(t, ns, db+"-0", db, "CREATE TABLE notes (id int PRIMARY KEY, body text)")
	s.appDB(t, ns, db+"-0", db, "INSERT INTO notes SELECT g, md5(g::text) FROM generate_series(1, 1000) g")
	// The rows reach the archive (a drill replays the archive after the
	// backup: they are in what it reads).
	seg := s.superSQL(ns, db+"-0", "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 3*time.Minute, "segment "+seg+" in the bucket", func() (bool, string) {
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, db+"-0", "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})
	archived := time.Now()

	var first map[string]any
	eventually(t, 8*time.Minute, "a drill that verified the rows", func() (bool, string) {
		u := d.get(t)
		first, _, _ = unstructured.NestedMap(u.Object, "status", "drill")
		c := kube.GetCondition(u, "BackupVerified")
		sched, _ := first["scheduled"].(string)
		ran, _ := time.Parse(time.RFC3339, sched)
		rows, _ := first["rows"].(int64)
		return c.Status == "True" && ran.After(archived) && rows >= 1000, fmt.Sprintf("BackupVerified %s %s: %s; status.drill %v; jobs: %s", c.Status, c.Reason, c.Message, first, s.jobsState(ns))
	})
	t.Logf("BackupVerified %s after creation: %s", time.Since(start).Round(time.Second), kube.GetCondition(d.get(t), "BackupVerified").Message)
	label, _ := first["backup"].(string)
	if label == "" || first["restoredTo"] == "" {
		t.Fatalf("status.drill names no backup or point: %v", first)
	}

	// The backup's biggest file in the bucket (a bundle) corrupted.
	biggest, size, err := corrupt.Backup(filepath.Join(store.repository(ns, db), "backup", "db", label))
	if err != nil {
		t.Fatal(err)
	}
	corrupted := time.Now()
	t.Logf("corrupted %s (%d bytes) of backup %s", filepath.Base(biggest), size, label)
	eventually(t, 8*time.Minute, "BackupVerified False naming the corrupted backup", func() (bool, string) {
		c := kube.GetCondition(d.get(t), "BackupVerified")
		return c.Status == "False" && c.Reason == "DrillFailed" && strings.Contains(c.Message, label), fmt.Sprintf("%s %s: %s; jobs: %s", c.Status, c.Reason, c.Message, s.jobsState(ns))
	})
	t.Logf("BackupVerified False %s after the corruption: %s", time.Since(corrupted).Round(time.Second), kube.GetCondition(d.get(t), "BackupVerified").Message)
}

// bucketUnreachable: the S3 server stopped while the primary writes more
// WAL than its volume could keep: writes go on, WALArchive turns False
// within the check's interval, pg_wal comes back within its bound
// (pgBackRest drops what is past its queue: a gap in the archive, never a
// full disk), and once the server is back the archive resumes and the
// condition is True again.
func (s *suite) bucketUnreachable(t *testing.T, store *objectStore, d database, ns, db string) {
	primary := str(d.get(t), "status", "primary")
	walBytes := func() int64 {
		n, _ := strconv.ParseInt(s.superSQL(ns, primary, "SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()"), 10, 64)
		return n
	}
	store.proc.Stop(10 * time.Second)
	stopped := time.Now()
	restarted := false
	defer func() {
		if !restarted {
			_ = store.proc.Start()
		}
	}()
	s.appDB(t, ns, primary, db, "CREATE TABLE churn (id int, pad text)")
	// The data volume is 1Gi: max_wal_size 256MB, wal_keep_size 64MB,
	// max_slot_wal_keep_size 128MB, archive-push-queue-max 128MiB (an
	// eighth). 800 MB of WAL, the table truncated between batches so
	// that only WAL grows: kept whole, it would fill the volume.
	const batches, bound = 32, int64(640) << 20
	var peak int64
	for i := range batches {
		s.appDB(t, ns, primary, db, fmt.Sprintf("BEGIN; TRUNCATE churn; INSERT INTO churn SELECT g, repeat(md5(g::text), 40) FROM generate_series(%d, %d) g; COMMIT", i*18000, i*18000+17999))
		s.superSQL(ns, primary, "SELECT pg_switch_wal()")
		peak = max(peak, walBytes())
	}
	written := s.superSQL(ns, primary, "SELECT pg_size_pretty(pg_current_wal_lsn() - '0/0'::pg_lsn)")
	t.Logf("with the bucket down: WAL written to %s in all, pg_wal peaked at %d MB while writing (%s after the stop)", written, peak>>20, time.Since(stopped).Round(time.Second))
	eventually(t, 3*time.Minute, "WALArchive False", func() (bool, string) {
		c := kube.GetCondition(d.get(t), "WALArchive")
		return c.Status == "False" && c.Reason == "ArchiveFailing", fmt.Sprintf("%s %s: %s; jobs: %s", c.Status, c.Reason, c.Message, s.jobsState(ns))
	})
	t.Logf("WALArchive False %s after the bucket stopped", time.Since(stopped).Round(time.Second))
	eventually(t, 4*time.Minute, fmt.Sprintf("pg_wal back within %d MB", bound>>20), func() (bool, string) {
		s.superSQL(ns, primary, "CHECKPOINT")
		n := walBytes()
		return n > 0 && n <= bound, fmt.Sprintf("pg_wal %d MB; %s", n>>20, s.superSQL(ns, primary, "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver"))
	})
	t.Logf("pg_wal back within %d MB %s after the stop (%d MB now)", bound>>20, time.Since(stopped).Round(time.Second), walBytes()>>20)

	if err := store.proc.Start(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	back := time.Now()
	var seg string
	eventually(t, 3*time.Minute, "a new segment in the bucket", func() (bool, string) {
		if seg == "" || store.archivedSegment(ns, db, seg) == "" {
			seg = s.superSQL(ns, primary, "SELECT pg_walfile_name(pg_switch_wal())")
		}
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, primary, "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})
	t.Logf("archiving resumed: %s in the bucket %s after the server returned", seg, time.Since(back).Round(time.Second))
	eventually(t, 4*time.Minute, "WALArchive True again", func() (bool, string) {
		c := kube.GetCondition(d.get(t), "WALArchive")
		return c.Status == "True", fmt.Sprintf("%s %s: %s; jobs: %s", c.Status, c.Reason, c.Message, s.jobsState(ns))
	})
	t.Logf("WALArchive True %s after the server returned", time.Since(back).Round(time.Second))
	// True means restorable to the end: the gap is closed by a full backup
	// (the marker gone). A run in progress once kept a success from two
	// runs back, and the next step's restore stopped before the gap.
	if gap := s.superSQL(ns, primary, "SELECT coalesce(pg_read_file('database.archive-gap', 0, 8192, true), '')"); strings.TrimSpace(gap) != "" {
		t.Errorf("WALArchive True while the archive has a gap (database.archive-gap: %s)", strings.Fields(gap))
	}
}

// archiveTimeout is the archived Composition's archiveTimeoutSeconds.
const archiveTimeout = 10 * time.Second

// allInstancesLost: with the checker's client writing, every instance of the
// Database is lost at once (frozen, then the Database and its volumes
// deleted); a new Database restored from its archive to the end holds every
// acknowledged write but those of the last archiveTimeout before the loss
// (the WAL not yet switched into a segment and pushed), counted by the
// failover checker.
func (s *suite) allInstancesLost(t *testing.T, d database, ns, db string) {
	const writerName = "writer"
	s.writerPod(t, ns, writerName, db)
	eventually(t, 2*time.Minute, "the writer's first acknowledged write", func() (bool, string) {
		log := s.podLog(ns, writerName, "writer")
		return !lastAcknowledged(writer.Parse(log)).IsZero(), lastLines(log, 3)
	})
	// Writes for a while: several archive_timeout switches.
	time.Sleep(3 * archiveTimeout)
	pods, err := s.instancePods(ns, db)
	if err != nil {
		t.Fatal(err)
	}
	fault := time.Now()
	for _, p := range pods {
		thaw := holdFrozen(t, p.Name, string(p.UID))
		defer thaw()
	}
	t.Logf("every instance of %s frozen at %s", db, fault.UTC().Format("15:04:05.000"))
	// The writer's log ends at the loss: nothing after it can be acked.
	time.Sleep(2 * time.Second)
	attempts := writer.Parse(s.podLog(ns, writerName, "writer"))
	_ = s.k.CS.CoreV1().Pods(ns).Delete(context.Background(), writerName, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err := s.k.Delete(context.Background(), d.gvk, d.ns, d.name); err != nil {
		t.Fatalf("delete %s: %v", d, err)
	}

	const restored = "ledger-restored"
	u := realDatabase(t, ns, restored, "small", map[string]any{"restoreFrom": map[string]any{"database": db, "from": "Archive"}})
	if err := unstructured.SetNestedField(u.Object, archivedComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rd := s.create(t, u)
	defer func() { _ = s.k.Delete(context.Background(), rd.gvk, rd.ns, rd.name) }()
	s.waitRealReady(t, rd)
	t.Logf("restored to the archive's end and ready in %s", time.Since(start).Round(time.Second))
	// The whole archive replayed: the first primary's report names the
	// archive's end and the segment the replay ended in, not before it.
	if c := kube.GetCondition(rd.get(t), "Restored"); c.Reason != "RestoreSucceeded" {
		t.Errorf("Restored %s %s: %s; want RestoreSucceeded (no gap)", c.Status, c.Reason, c.Message)
	}
	if p, err := s.k.CS.CoreV1().Pods(ns).Get(context.Background(), restored+"-0", metav1.GetOptions{}); err == nil {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "postgres" && cs.LastTerminationState.Terminated != nil {
				msg := cs.LastTerminationState.Terminated.Message
				if !strings.Contains(msg, `"archiveEnd":"0`) || !strings.Contains(msg, `"stoppedIn":"0`) {
					t.Errorf("the restore's report names no archive end or stopping segment: %s", msg)
				}
				t.Logf("the restore's report: %s", strings.TrimSpace(msg))
			}
		}
	}
	out := s.appDB(t, ns, restored+"-0", "ledger_restored", checker.SurvivingSQL)
	surviving, err := checker.ParseIDs(out)
	if err != nil {
		t.Fatal(err)
	}
	r := checker.Check(checker.Input{Scenario: "AllInstancesLost", Durability: checker.Async, Attempts: attempts, Surviving: surviving})
	t.Log(r)
	// Every lost write was acknowledged within the archive's exposure
	// before the loss: archive_timeout, plus a push (under a second) and
	// the sampling of the fault (2 s).
	bound := archiveTimeout + 5*time.Second
	var oldest time.Time
	for _, a := range attempts {
		if ack, ok := a.Ack(); ok && slices.Contains(r.Lost, a.ID) && (oldest.IsZero() || ack.At.Before(oldest)) {
			oldest = ack.At
		}
	}
	t.Logf("%d acknowledged writes, %d lost; the oldest lost was acknowledged %s before the loss (bound %s)",
		r.Acknowledged, len(r.Lost), durationOrNone(oldest, fault), bound)
	if r.Acknowledged == 0 {
		t.Fatal("no acknowledged write to check")
	}
	if !oldest.IsZero() && fault.Sub(oldest) > bound {
		t.Errorf("a write acknowledged %s before the loss was lost: over the archive's exposure of %s", fault.Sub(oldest).Round(time.Millisecond), bound)
	}
	if len(r.AckedByDeposed) > 0 || r.TwoPrimaries {
		t.Error(r.Err())
	}
}

func durationOrNone(t, ref time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return ref.Sub(t).Round(time.Millisecond).String()
}

// appDB runs a statement as the superuser in the app database of pod's
// Database, over the pod's own socket.
func (s *suite) appDB(t *testing.T, ns, pod, dbname, stmt string) string {
	t.Helper()
	out, err := s.execIn(ns, pod, "postgres", "bash", "-c",
		`exec psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$PGPORT" -U "$(<"$ADMIN_SECRET_DIR/username")" -d "$1" -c "$0"`, stmt, dbname)
	if err != nil {
		t.Fatalf("%s in %s/%s: %v: %s", stmt, ns, pod, err, out)
	}
	return strings.TrimSpace(out)
}

// pointInTime: rows written at known times on the archived Database; a new
// Database restored from its archive to a time between two writes has
// exactly the rows before it, under its own names, and its standby (cloned
// from the restored primary) replays past that time.
func (s *suite) pointInTime(t *testing.T, store *objectStore, src database, ns, db string) {
	primary := str(src.get(t), "status", "primary")
	s.appDB(t, ns, primary, db, "CREATE TABLE marks (id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
	s.appDB(t, ns, primary, db, "INSERT INTO marks (id) SELECT generate_series(1, 100)")
	target := s.appDB(t, ns, primary, db, `SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`)
	s.appDB(t, ns, primary, db, "INSERT INTO marks (id) SELECT generate_series(101, 150)")
	// The target is reached only by replaying a commit after it: that
	// segment must be in the bucket.
	seg := s.superSQL(ns, primary, "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, 2*time.Minute, "segment "+seg+" in the bucket", func() (bool, string) {
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, primary, "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})

	const copyName = "ledger-pitr"
	u := realDatabase(t, ns, copyName, "medium", map[string]any{"restoreFrom": map[string]any{"database": db, "from": "Archive", "pointInTime": target}})
	if err := unstructured.SetNestedField(u.Object, archivedComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cp := s.create(t, u)
	defer func() { _ = s.k.Delete(context.Background(), cp.gvk, cp.ns, cp.name) }()
	// The restoring primary's own words when it does not get there (a
	// hold names its reason in its log only; its pod's logs go with it).
	eventually(t, realReady, cp.String()+" Ready", func() (bool, string) {
		u := cp.get(t)
		return kube.GetCondition(u, "Ready").Status == "True", kube.ConditionsString(u) + "; " + s.podsState(ns, copyName) + "; " + copyName + "-0: " + s.postgresTail(ns, copyName+"-0", false, 8)
	})
	t.Logf("restored to %s and ready (two instances) in %s", target, time.Since(start).Round(time.Second))
	if got := s.appDB(t, ns, copyName+"-0", "ledger_pitr", "SELECT count(*), max(id) FROM marks"); got != "100|100" {
		t.Errorf("the copy restored to %s has count|max %s, want 100|100 (every row before the target, none after)", target, got)
	}
	cu := cp.get(t)
	if c := kube.GetCondition(cu, "Restored"); c.Status != "True" {
		t.Errorf("Restored %s %s: %s", c.Status, c.Reason, c.Message)
	}
	// The same instant (the function writes it in RFC 3339 with no
	// trailing zeros).
	got := str(cu, "status", "restore", "pointInTime")
	gt, gerr := time.Parse(time.RFC3339Nano, got)
	wt, werr := time.Parse(time.RFC3339Nano, target)
	if gerr != nil || werr != nil || !gt.Equal(wt) {
		t.Errorf("status.restore.pointInTime %q, want %q", got, target)
	}
	// What the replay reached, as the restored primary reported it (its
	// first run's termination message): the commit of the first 100 rows,
	// after their clock_timestamp() and not after the target.
	inserted := s.appDB(t, ns, copyName+"-0", "ledger_pitr", `SELECT to_char(max(at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM marks WHERE id <= 100`)
	reached := str(cu, "status", "restore", "restoredTo")
	rt, rerr := time.Parse(time.RFC3339Nano, reached)
	it, ierr := time.Parse(time.RFC3339Nano, inserted)
	if rerr != nil || ierr != nil || rt.Before(it) || rt.After(wt) {
		t.Errorf("status.restore.restoredTo %q, want the first rows' commit: after %s, not after %s", reached, inserted, target)
	}
	if tl, _, _ := unstructured.NestedInt64(cu.Object, "status", "restore", "timeline"); tl < 2 || str(cu, "status", "restore", "lsn") == "" {
		rec, _, _ := unstructured.NestedMap(cu.Object, "status", "restore")
		t.Errorf("status.restore %v: want the new timeline and its start", rec)
	}
	t.Logf("status.restore: restoredTo %s (target %s), timeline starts at %s", reached, target, str(cu, "status", "restore", "lsn"))
	// The standby, cloned from the restored primary, follows it past the
	// target: its recovery settings are gone.
	s.appDB(t, ns, copyName+"-0", "ledger_pitr", "INSERT INTO marks (id) VALUES (1000)")
	eventually(t, 2*time.Minute, "the copy's standby replaying past the target", func() (bool, string) {
		out, err := s.execIn(ns, copyName+"-1", "postgres", "bash", "-c",
			`exec psql -X -A -t -q -h "$PGHOST" -p "$PGPORT" -U "$(<"$ADMIN_SECRET_DIR/username")" -d ledger_pitr -c "SELECT count(*) FROM marks WHERE id = 1000"`)
		return strings.TrimSpace(out) == "1", fmt.Sprintf("%v %s", err, out)
	})
}

// archiveFollowsFailover: a Database archives its WAL and a first full
// backup to the bucket; its primary lost, the promoted standby archives on
// its new timeline, with nothing done by hand. It sets *created as soon as
// the Database exists (TestBackups removes it, even after a failure here).
func (s *suite) archiveFollowsFailover(t *testing.T, store *objectStore, ns, db string, created *database) {
	u := realDatabase(t, ns, db, "medium", nil)
	if err := unstructured.SetNestedField(u.Object, archivedComposition, "spec", "crossplane", "compositionRef", "name"); err != nil {
		t.Fatal(err)
	}
	d := s.create(t, u)
	*created = d
	start := time.Now()
	s.waitRealReady(t, d)
	t.Logf("ready in %s", time.Since(start).Round(time.Second))

	// The platform's Secret, read by Crossplane core with its own
	// permissions, copied beside the Database.
	if got := s.secretKey(t, ns, db+"-object-storage", "AWS_ACCESS_KEY_ID"); got != "e2e-archive" {
		t.Errorf("the copied Secret's access key is %q", got)
	}
	repo := store.repository(ns, db)
	eventually(t, 3*time.Minute, "the first full backup in the bucket", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(repo, "backup", "db", "backup.info"))
		return err == nil && strings.Contains(string(b), "F={"), fmt.Sprintf("backup.info: %v; sidecar: %s", err, lastLines(s.podLog(ns, db+"-0", "password-sync"), 5))
	})
	t.Logf("first full backup in the bucket %s after creation", time.Since(start).Round(time.Second))
	seg := s.superSQL(ns, db+"-0", "SELECT pg_walfile_name(pg_switch_wal())")
	eventually(t, time.Minute, "segment "+seg+" in the bucket", func() (bool, string) {
		return store.archivedSegment(ns, db, seg) != "", s.superSQL(ns, db+"-0", "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver")
	})

	// The primary lost (frozen until a standby is promoted).
	pod, err := s.k.CS.CoreV1().Pods(ns).Get(context.Background(), db+"-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fault := time.Now()
	thaw := holdFrozen(t, pod.Name, string(pod.UID))
	defer thaw()
	eventually(t, 4*time.Minute, "a standby promoted", func() (bool, string) {
		u := d.get(t)
		c := kube.GetCondition(u, "Failover")
		return str(u, "status", "primary") == db+"-1", fmt.Sprintf("primary %s; Failover %s %s: %s; jobs: %s", str(u, "status", "primary"), c.Status, c.Reason, c.Message, s.jobsState(ns))
	})
	t.Logf("promoted %s after the freeze", time.Since(fault).Round(time.Second))
	thaw()

	// The promoted standby archives its timeline: its segments reach the
	// bucket without anything done by hand.
	promotedAt := time.Now()
	var tl2 string
	eventually(t, 2*time.Minute, "a segment of the new timeline in the bucket", func() (bool, string) {
		if tl2 == "" || store.archivedSegment(ns, db, tl2) == "" {
			out := s.superSQL(ns, db+"-1", "SELECT pg_walfile_name(pg_switch_wal())")
			if strings.HasPrefix(out, "00000002") {
				tl2 = out
			}
		}
		return tl2 != "" && store.archivedSegment(ns, db, tl2) != "", fmt.Sprintf("switched %q; %s", tl2, s.superSQL(ns, db+"-1", "SELECT last_archived_wal, failed_count, last_failed_wal FROM pg_stat_archiver"))
	})
	t.Logf("segment %s of timeline 2 in the bucket %s after the promotion", tl2, time.Since(promotedAt).Round(time.Second))
	if h, _ := filepath.Glob(filepath.Join(repo, "archive", "db", "*", "00000002.history")); len(h) == 0 {
		t.Error("no 00000002.history in the bucket: a restore could not follow the new timeline")
	}
	// The check CronJob (every minute here) says so in WALArchive.
	s.waitArchiving(t, d, ns)
	t.Logf("WALArchive True %s after creation", time.Since(start).Round(time.Second))

	// A full backup on the Database's schedule, taken by the promoted
	// primary.
	asked := time.Now()
	label, _ := s.fullBackupNow(t, repo, ns, db, db+"-1")
	t.Logf("full backup %s on request, taken by the promoted primary %s after the Job's creation", label, time.Since(asked).Round(time.Second))
}

// waitArchiving waits for the Database's WALArchive condition to say
// Archiving (the archive check CronJob runs every minute here).
func (s *suite) waitArchiving(t *testing.T, d database, ns string) {
	t.Helper()
	eventually(t, 3*time.Minute, "WALArchive True", func() (bool, string) {
		c := kube.GetCondition(d.get(t), "WALArchive")
		return c.Status == "True" && c.Reason == "Archiving", fmt.Sprintf("%s %s: %s; jobs: %s", c.Status, c.Reason, c.Message, s.jobsState(ns))
	})
}

// fullBackupNow runs the Database's full backup CronJob (N-full) now, as its
// schedule would: its Job's pod asks whichever instance is primary, the
// primary's sidecar takes the backup, and the Job ends with the answer. It
// returns the new backup's label (the one primary's sidecar names for this
// Job, new in the repository's backup.info) and the node the Job's pod ran
// on.
func (s *suite) fullBackupNow(t *testing.T, repo, ns, db, primary string) (label, node string) {
	t.Helper()
	before := fullBackups(t, repo)
	job := s.runCronJobNow(t, ns, db+"-full")
	eventually(t, 4*time.Minute, "Job "+job+" succeeded", func() (bool, string) {
		j, err := s.k.CS.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return j.Status.Succeeded > 0, fmt.Sprintf("active=%d failed=%d; sidecar of %s: %s", j.Status.Active, j.Status.Failed, primary, lastLines(s.podLog(ns, primary, "password-sync"), 3))
	})
	pods, err := s.k.CS.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			node = p.Spec.NodeName
		}
	}
	// The backup taken for this Job's pod: the CronJob's own schedule may
	// have asked for another meanwhile (the Database keeps README's
	// "0 2 * * *", and a run at 02:00 did).
	log := s.podLog(ns, primary, "password-sync")
	m := regexp.MustCompile(`full backup (\S+) taken \(stopped [^)]*\) for `+regexp.QuoteMeta(job)+`-`).FindAllStringSubmatch(log, -1)
	if len(m) != 1 {
		t.Fatalf("the primary %s's sidecar names %d backups taken for Job %s, want 1:\n%s", primary, len(m), job, lastLines(log, 10))
	}
	label = m[0][1]
	after := fullBackups(t, repo)
	if !slices.Contains(after, label) || slices.Contains(before, label) {
		t.Fatalf("full backups in the bucket %v after the Job, were %v: want %s among the new ones", after, before, label)
	}
	return label, node
}

// fullBackups are the labels of the full backups in a repository's
// backup.info, oldest first.
func fullBackups(t *testing.T, repo string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "backup", "db", "backup.info"))
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, l := range strings.Split(string(b), "\n") {
		if label, _, ok := strings.Cut(l, "={"); ok && strings.HasSuffix(label, "F") && len(label) == len("20261202-153258F") {
			labels = append(labels, label)
		}
	}
	return labels
}

// runCronJobNow creates a Job from a CronJob's template, as `kubectl create
// job --from=cronjob/NAME` does, and returns its name.
func (s *suite) runCronJobNow(t *testing.T, ns, cronJob string) string {
	t.Helper()
	cj, err := s.k.CS.BatchV1().CronJobs(ns).Get(context.Background(), cronJob, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: cronJob + "-manual", Namespace: ns, Labels: cj.Spec.JobTemplate.Labels,
			Annotations: map[string]string{"cronjob.kubernetes.io/instantiate": "manual"},
		},
		Spec: cj.Spec.JobTemplate.Spec,
	}
	if _, err := s.k.CS.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := metav1.DeletePropagationBackground
		_ = s.k.CS.BatchV1().Jobs(ns).Delete(context.Background(), j.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	return j.Name
}
