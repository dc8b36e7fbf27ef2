package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/input/v1beta1"
)

// archiveExample is the archive example's first reconcile, with the
// platform's Secret in the cluster.
func archiveExample(t *testing.T) *fnv1.RunFunctionResponse {
	t.Helper()
	return runTest(t, xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), compositionInput(t, "example/archive/composition.yaml")))
}

// pgbackrestConfGolden is the archive example's pgbackrest.conf, which the
// scripts tests run real pgBackRest with (scripts/archive_test.go), their
// paths, endpoint and repository path overridden in pgBackRest's
// environment: the function's own file is what is proved to archive.
const pgbackrestConfGolden = "scripts/testdata/pgbackrest.conf"

func TestPgbackrestConf(t *testing.T) {
	rsp := archiveExample(t)
	cm := decodeInto[corev1.ConfigMap](t, rsp.GetDesired().GetResources()[string(rnScripts)].GetResource())
	got := cm.Data[keyPgbackrestConf]
	if got == "" {
		t.Fatal("the archive example's ConfigMap has no pgbackrest.conf")
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(pgbackrestConfGolden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pgbackrestConfGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(pgbackrestConfGolden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s is stale; run go test -run TestPgbackrestConf -update (-golden +composed):\n%s", pgbackrestConfGolden, d)
	}
	// Every option is one pgBackRest 2.45 knows, with a value it takes:
	// its own parser reads the file (info, which reaches for the bucket and
	// fails there, after the options were read; a misspelt option is a
	// warning, a bad value an error).
	if _, err := exec.LookPath("pgbackrest"); err != nil {
		if os.Getenv("FNDB_REQUIRE_TOOLS") != "" || os.Getenv("CI") != "" {
			t.Fatal("pgbackrest not found (hack/install-postgres.sh installs it)")
		}
		t.Skip("pgbackrest not found (hack/install-postgres.sh installs it)")
	}
	conf := filepath.Join(t.TempDir(), "pgbackrest.conf")
	if err := os.WriteFile(conf, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("pgbackrest", "--config="+conf, "--stanza=db", "--log-level-console=warn", "--io-timeout=1", "info")
	cmd.Env = append(os.Environ(), "PGBACKREST_REPO1_S3_KEY=k", "PGBACKREST_REPO1_S3_KEY_SECRET=s")
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "stanza: db") || strings.Contains(string(out), "WARN") || strings.Contains(string(out), "ERROR") {
		t.Errorf("pgbackrest does not take the composed configuration as it is:\n%s", out)
	}
}

// TestRetentionByCount: retentionFullBackups makes pgBackRest keep that
// many full backups, whatever their age, instead of the default 7 days.
func TestRetentionByCount(t *testing.T) {
	in := compositionInput(t, "example/archive/composition.yaml")
	in.Fields["objectStorage"].GetStructValue().Fields["retentionFullBackups"] = structpb.NewNumberValue(4)
	rsp := runTest(t, xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), in))
	cm := decodeInto[corev1.ConfigMap](t, rsp.GetDesired().GetResources()[string(rnScripts)].GetResource())
	if want := "repo1-retention-full-type=count\nrepo1-retention-full=4\n"; !strings.Contains(cm.Data[keyPgbackrestConf], want) {
		t.Errorf("pgbackrest.conf lacks %q:\n%s", want, cm.Data[keyPgbackrestConf])
	}
	if want := "repo1-retention-full-type=time\nrepo1-retention-full=7\n"; !strings.Contains(decodeInto[corev1.ConfigMap](t, archiveExample(t).GetDesired().GetResources()[string(rnScripts)].GetResource()).Data[keyPgbackrestConf], want) {
		t.Errorf("the default pgbackrest.conf lacks %q", want)
	}
}

func TestArchiveComposed(t *testing.T) {
	rsp := archiveExample(t)
	desired := rsp.GetDesired().GetResources()
	s := decodeInto[corev1.Secret](t, desired[string(rnObjectStorage)].GetResource())
	if s.Name != "ledger-object-storage" || s.Namespace != "shop" {
		t.Errorf("the copy is %s/%s, want shop/ledger-object-storage", s.Namespace, s.Name)
	}
	if string(s.Data[keyAccessKeyID]) != "EXAMPLEACCESSKEY" || len(s.Data[keySecretAccessKey]) == 0 {
		t.Errorf("the copy's keys: %v", s.Data)
	}
	cm := decodeInto[corev1.ConfigMap](t, desired[string(rnScripts)].GetResource())
	for _, want := range []string{"archive_mode = 'on'", "archive_command = 'bash /opt/database/scripts/pgbackrest.sh push %p'", "archive_timeout = '60s'"} {
		if !strings.Contains(cm.Data[keyPostgresqlConf], want) {
			t.Errorf("postgresql.conf lacks %s:\n%s", want, cm.Data[keyPostgresqlConf])
		}
	}
	sel := rsp.GetRequirements().GetResources()[requirementObjectStorage]
	if sel.GetKind() != "Secret" || sel.GetMatchName() != "pg-archive" || sel.GetNamespace() != "crossplane-system" {
		t.Errorf("requires %v, want the Secret crossplane-system/pg-archive", sel)
	}
	cond := conditionOf(rsp, condWALArchive)
	if cond == nil || cond.GetStatus() != fnv1.Status_STATUS_CONDITION_UNKNOWN || cond.GetReason() != reasonArchiveNotChecked {
		t.Errorf("WALArchive condition %v, want Unknown %s", cond, reasonArchiveNotChecked)
	}
	cj := decodeInto[batchv1.CronJob](t, desired[string(rnArchiveCheck)].GetResource())
	if cj.Name != "ledger-wal" || cj.Spec.Schedule != "*/5 * * * *" {
		t.Errorf("the archive check is CronJob %s on %q", cj.Name, cj.Spec.Schedule)
	}
}

// TestArchiveCheckCondition: WALArchive follows the check CronJob's last
// run, and a run in progress keeps the previous verdict.
func TestArchiveCheckCondition(t *testing.T) {
	db := &database{Name: "ledger", ObjectStorage: &objectStorage{CheckMinutes: 5}}
	ts := func(s string) *metav1.Time { return at(t, s) }
	cases := []struct {
		name   string
		status *batchv1.CronJobStatus
		want   fnv1.Status
		reason string
	}{
		{"no CronJob yet", nil, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonArchiveNotChecked},
		{"never scheduled", &batchv1.CronJobStatus{}, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonArchiveNotChecked},
		{"the last run succeeded", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-02T10:05:00Z"), LastSuccessfulTime: ts("2026-12-02T10:05:04Z")}, fnv1.Status_STATUS_CONDITION_TRUE, reasonArchiveKeepsUp},
		{"the last run failed", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-02T10:05:00Z"), LastSuccessfulTime: ts("2026-12-02T10:00:04Z")}, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveFailing},
		{"never succeeded", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-02T10:05:00Z")}, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveFailing},
		{"running, the previous one succeeded", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-02T10:05:00Z"), LastSuccessfulTime: ts("2026-12-02T10:00:04Z"), Active: []corev1.ObjectReference{{Name: "ledger-wal-1"}}}, fnv1.Status_STATUS_CONDITION_TRUE, reasonArchiveKeepsUp},
		{"running, the previous one failed", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-02T10:10:00Z"), LastSuccessfulTime: ts("2026-12-02T10:00:04Z"), Active: []corev1.ObjectReference{{Name: "ledger-wal-2"}}}, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveFailing},
		{"the first run running", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-02T10:05:00Z"), Active: []corev1.ObjectReference{{Name: "ledger-wal-1"}}}, fnv1.Status_STATUS_CONDITION_UNKNOWN, reasonArchiveNotChecked},
		// Every minute: the 12:44 run failed, the 12:43 one succeeded at
		// 12:43:04, the 12:45 one runs: the verdict is the 12:44 run's.
		{"every minute, running, the previous one failed", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-03T12:45:00Z"), LastSuccessfulTime: ts("2026-12-03T12:43:04Z"), Active: []corev1.ObjectReference{{Name: "ledger-wal-3"}}}, fnv1.Status_STATUS_CONDITION_FALSE, reasonArchiveFailing},
		{"every minute, running, the previous one succeeded", &batchv1.CronJobStatus{LastScheduleTime: ts("2026-12-03T12:45:00Z"), LastSuccessfulTime: ts("2026-12-03T12:44:04Z"), Active: []corev1.ObjectReference{{Name: "ledger-wal-3"}}}, fnv1.Status_STATUS_CONDITION_TRUE, reasonArchiveKeepsUp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cj *batchv1.CronJob
			if tc.status != nil {
				cj = &batchv1.CronJob{Status: *tc.status}
			}
			db := db
			if strings.HasPrefix(tc.name, "every minute") {
				db = &database{Name: "ledger", ObjectStorage: &objectStorage{CheckMinutes: 1}}
			}
			c := archiveCheckCondition(db, cj, "s3://b/p")
			if c.Status != tc.want || c.Reason != tc.reason {
				t.Errorf("got %v %s (%s), want %v %s", c.Status, c.Reason, c.Message, tc.want, tc.reason)
			}
		})
	}
}

// TestArchiveSecretKept: the platform's Secret deleted, the copy beside
// the Database stays as it was (dropping it would stop every Database's
// archive at once); once the function reads the Secret again (the archive
// check failed), the condition says the copy is kept.
func TestArchiveSecretKept(t *testing.T) {
	req := xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), compositionInput(t, "example/archive/composition.yaml"))
	rsp := runTest(t, req)
	feedBack(t, req, rsp, true)
	setObservedStatus(t, req, rnArchiveCheck, map[string]any{"lastScheduleTime": "2026-11-28T02:05:00Z", "lastSuccessfulTime": "2026-11-28T02:00:04Z"})
	// A cluster without the platform's Secret.
	var cluster []*structpb.Struct
	for _, o := range exampleCluster(t) {
		if stringAt(o, "kind") != "Secret" {
			cluster = append(cluster, o)
		}
	}
	rsp = runTestIn(t, req, cluster)
	s := decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[string(rnObjectStorage)].GetResource())
	if string(s.Data[keyAccessKeyID]) != "EXAMPLEACCESSKEY" {
		t.Errorf("the copy was not kept: %v", s.Data)
	}
	cond := conditionOf(rsp, condWALArchive)
	if cond == nil || cond.GetStatus() != fnv1.Status_STATUS_CONDITION_FALSE || cond.GetReason() != reasonArchiveSecretAbsent || !strings.Contains(cond.GetMessage(), "is kept") {
		t.Errorf("WALArchive condition %v, want False %s saying the copy is kept", cond, reasonArchiveSecretAbsent)
	}
}

// TestArchiveSecretRead: the platform's Secret is read (a second call of
// the function in the reconcile) only while the observed state cannot
// settle the copy; a healthy archived Database costs one call, and its
// copy is composed from the observed one, byte for byte.
func TestArchiveSecretRead(t *testing.T) {
	healthy := map[string]any{"lastScheduleTime": "2026-11-28T02:05:00Z", "lastSuccessfulTime": "2026-11-28T02:05:04Z"}
	cases := []struct {
		name   string
		first  bool                 // no observed state at all
		status map[string]any       // the archive check CronJob's status
		edit   func(*corev1.Secret) // the observed copy, changed
		noCopy bool                 // the copy not observed
		want   bool                 // the platform's Secret required
	}{
		{name: "first reconcile", first: true, want: true},
		{name: "healthy", status: healthy},
		{name: "the copy missing", status: healthy, noCopy: true, want: true},
		{name: "a copy of another Secret (secretRef changed)", status: healthy, edit: func(s *corev1.Secret) {
			s.Annotations[annotationObjectStorageSource] = "crossplane-system/old-keys"
		}, want: true},
		{name: "a copy from before the annotation", status: healthy, edit: func(s *corev1.Secret) { s.Annotations = nil }, want: true},
		{name: "a copy without its secret key", status: healthy, edit: func(s *corev1.Secret) { delete(s.Data, keySecretAccessKey) }, want: true},
		{name: "the archive check failed", status: map[string]any{"lastScheduleTime": "2026-11-28T02:05:00Z", "lastSuccessfulTime": "2026-11-28T02:00:04Z"}, want: true},
		{name: "the archive never checked", status: map[string]any{}, want: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), compositionInput(t, "example/archive/composition.yaml"))
			if !tc.first {
				feedBack(t, req, runTest(t, req), true)
				setObservedStatus(t, req, rnArchiveCheck, tc.status)
				if tc.noCopy {
					delete(req.Observed.Resources, string(rnObjectStorage))
				}
				if tc.edit != nil {
					r := req.Observed.Resources[string(rnObjectStorage)]
					s := decodeInto[corev1.Secret](t, r.GetResource())
					tc.edit(s)
					req.Observed.Resources[string(rnObjectStorage)] = encodeObserved(t, s)
				}
			}
			// One call, as Crossplane's first of the reconcile.
			rsp := runOnce(t, req)
			_, got := rsp.GetRequirements().GetResources()[requirementObjectStorage]
			if got != tc.want {
				t.Errorf("the platform's Secret required: %v, want %v", got, tc.want)
			}
			if got {
				// The answer does not depend on the Secret itself: the
				// second call asks the same.
				req.RequiredResources = map[string]*fnv1.Resources{requirementObjectStorage: fetchRequired(rsp.GetRequirements().GetResources()[requirementObjectStorage], exampleCluster(t))}
				again := runOnce(t, req)
				if diff := cmp.Diff(rsp.GetRequirements(), again.GetRequirements(), protocmp.Transform()); diff != "" {
					t.Errorf("the second call asks otherwise (-first +second):\n%s", diff)
				}
				return
			}
			if tc.first {
				return
			}
			s := decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[string(rnObjectStorage)].GetResource())
			if string(s.Data[keyAccessKeyID]) != "EXAMPLEACCESSKEY" || s.Annotations[annotationObjectStorageSource] != "crossplane-system/pg-archive" {
				t.Errorf("the copy composed from the observed one: %v %v", s.Annotations, s.Data)
			}
		})
	}
}

// TestArchiveNeedsPgBackRest: objectStorage with the official image, whose
// pods would all hold, is refused where the platform team reads it.
func TestArchiveNeedsPgBackRest(t *testing.T) {
	in := compositionInput(t, "example/archive/composition.yaml")
	delete(in.GetFields(), "image")
	assertFatal(t, "objectStorage with the official image", runTest(t, xrRequest(readYAMLStruct(t, "example/archive/xr.yaml"), in)), "input.image", "pgBackRest")
}

func TestResolveObjectStorage(t *testing.T) {
	valid := func() *v1beta1.ObjectStorage {
		return &v1beta1.ObjectStorage{Endpoint: "s3.example.com", Bucket: "pg-archive", SecretRef: v1beta1.SecretReference{Name: "s3", Namespace: "crossplane-system"}}
	}
	cases := []struct {
		name   string
		edit   func(*v1beta1.ObjectStorage)
		want   *objectStorage
		errors []string // field paths, in order
	}{
		{"defaults", func(*v1beta1.ObjectStorage) {}, &objectStorage{Host: "s3.example.com", Bucket: "pg-archive", Prefix: "function-database", Region: "us-east-1", URIStyle: "Host", SecretName: "s3", SecretNamespace: "crossplane-system", ArchiveTimeout: 60, CheckMinutes: 5, RetentionDays: 7, DrillSchedule: defaultDrillSchedule}, nil},
		{"host and port, path style", func(o *v1beta1.ObjectStorage) {
			o.Endpoint, o.URIStyle, o.PathPrefix, o.ArchiveTimeoutSeconds = "10.0.0.7:9000", "Path", "/prod/eu/", ptr.To[int32](30)
			o.Drill, o.RetentionDays = &v1beta1.Drill{Schedule: "0 3 * * *"}, ptr.To[int32](30)
		}, &objectStorage{Host: "10.0.0.7", Port: 9000, Bucket: "pg-archive", Prefix: "prod/eu", Region: "us-east-1", URIStyle: "Path", SecretName: "s3", SecretNamespace: "crossplane-system", ArchiveTimeout: 30, CheckMinutes: 5, RetentionDays: 30, DrillSchedule: "0 3 * * *"}, nil},
		{"no drill", func(o *v1beta1.ObjectStorage) { o.Drill = &v1beta1.Drill{Enabled: ptr.To(false)} },
			&objectStorage{Host: "s3.example.com", Bucket: "pg-archive", Prefix: "function-database", Region: "us-east-1", URIStyle: "Host", SecretName: "s3", SecretNamespace: "crossplane-system", ArchiveTimeout: 60, CheckMinutes: 5, RetentionDays: 7}, nil},
		{"a check every hour", func(o *v1beta1.ObjectStorage) { o.CheckMinutes = ptr.To[int32](60) }, nil, []string{"input.objectStorage.checkMinutes"}},
		{"no retention", func(o *v1beta1.ObjectStorage) { o.RetentionDays = ptr.To[int32](0) }, nil, []string{"input.objectStorage.retentionDays"}},
		{"a count of full backups", func(o *v1beta1.ObjectStorage) { o.RetentionFullBackups = ptr.To[int32](4) },
			&objectStorage{Host: "s3.example.com", Bucket: "pg-archive", Prefix: "function-database", Region: "us-east-1", URIStyle: "Host", SecretName: "s3", SecretNamespace: "crossplane-system", ArchiveTimeout: 60, CheckMinutes: 5, RetentionFullBackups: 4, DrillSchedule: defaultDrillSchedule}, nil},
		{"age and count", func(o *v1beta1.ObjectStorage) {
			o.RetentionDays, o.RetentionFullBackups = ptr.To[int32](7), ptr.To[int32](4)
		}, nil, []string{"input.objectStorage.retentionFullBackups"}},
		{"too many full backups", func(o *v1beta1.ObjectStorage) { o.RetentionFullBackups = ptr.To[int32](1000) }, nil, []string{"input.objectStorage.retentionFullBackups"}},
		{"a bad drill schedule", func(o *v1beta1.ObjectStorage) { o.Drill = &v1beta1.Drill{Schedule: "weekly"} }, nil, []string{"input.objectStorage.drill.schedule"}},
		{"a scheme", func(o *v1beta1.ObjectStorage) { o.Endpoint = "https://s3.example.com" }, nil, []string{"input.objectStorage.endpoint"}},
		{"a bad port", func(o *v1beta1.ObjectStorage) { o.Endpoint = "s3.example.com:99999" }, nil, []string{"input.objectStorage.endpoint"}},
		{"a bad bucket", func(o *v1beta1.ObjectStorage) { o.Bucket = "PG_Archive" }, nil, []string{"input.objectStorage.bucket"}},
		{"a climbing prefix", func(o *v1beta1.ObjectStorage) { o.PathPrefix = "a/../b" }, nil, []string{"input.objectStorage.pathPrefix"}},
		{"an unknown style", func(o *v1beta1.ObjectStorage) { o.URIStyle = "Virtual" }, nil, []string{"input.objectStorage.uriStyle"}},
		{"no secret", func(o *v1beta1.ObjectStorage) { o.SecretRef = v1beta1.SecretReference{} }, nil, []string{"input.objectStorage.secretRef.name", "input.objectStorage.secretRef.namespace"}},
		{"a timeout too short", func(o *v1beta1.ObjectStorage) { o.ArchiveTimeoutSeconds = ptr.To[int32](1) }, nil, []string{"input.objectStorage.archiveTimeoutSeconds"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := valid()
			tc.edit(in)
			got, errs := resolveObjectStorage(field.NewPath("input", "objectStorage"), in)
			var paths []string
			for _, e := range errs {
				paths = append(paths, e.Field)
			}
			if d := cmp.Diff(tc.errors, paths); d != "" {
				t.Fatalf("errors (-want +got):\n%s\n%v", d, errs)
			}
			if tc.want != nil {
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("resolved (-want +got):\n%s", d)
				}
			}
		})
	}
}

// TestArchiveRestoreReport: what a restore from the archive reached is read
// from its first primary's last termination message, on the one reconcile
// after it is ready and before status.restore records it, and never again;
// a report lost to a second restart still completes the record, saying so.
func TestArchiveRestoreReport(t *testing.T) {
	const report = `{"result":"restored","source":"ledger","restoredTo":"2026-12-02T06:43:27.912345Z","lsn":"0/5000060","timeline":2,"seconds":41}`
	const xr = `apiVersion: example.com/v1
kind: Database
metadata: {name: ledger-copy, namespace: shop}
spec:
  version: "16"
  size: small
  restoreFrom: {database: ledger, from: Archive, pointInTime: "2026-12-02T07:43:28.082071+01:00"}`
	ready := func(t *testing.T) *fnv1.RunFunctionRequest {
		req := xrRequest(yamlStruct(t, xr), compositionInput(t, "example/archive/composition.yaml"))
		feedBack(t, req, runTest(t, req), true)
		return req
	}
	// withReport: the instance pods, the first one's postgres container
	// restarted once with message as its last termination message.
	withReport := func(t *testing.T, req *fnv1.RunFunctionRequest, message string) []*structpb.Struct {
		pods := instancePodsOf(t, req)
		for _, p := range pods {
			if stringAt(p, "metadata", "name") != "ledger-copy-0" {
				continue
			}
			cs, err := structpb.NewList([]any{map[string]any{
				"name": containerPostgres, "ready": true, "restartCount": 1,
				"state":     map[string]any{"running": map[string]any{"startedAt": "2026-12-02T06:50:12Z"}},
				"lastState": map[string]any{"terminated": map[string]any{"exitCode": 0, "reason": "Completed", "message": message}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			structAt(p, "status").Fields["containerStatuses"] = structpb.NewListValue(cs)
		}
		return append(slices.Clip(exampleCluster(t)), pods...)
	}
	restoreOf := func(rsp *fnv1.RunFunctionResponse) map[string]any {
		return rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["restore"].GetStructValue().AsMap()
	}

	t.Run("reported", func(t *testing.T) {
		req := ready(t)
		// Crossplane's first call: no pods yet; the function asks, records nothing.
		first := runOnce(t, req)
		if first.GetRequirements().GetResources()[requirementInstances] == nil {
			t.Fatal("the instance pods not asked for while the restore is not recorded")
		}
		if got := restoreOf(first)["completed"]; got != false {
			t.Errorf("recorded before the pods were read: completed %v", got)
		}
		rsp := runTestIn(t, req, withReport(t, req, report))
		want := map[string]any{"source": "ledger", "backup": "archive", "pointInTime": "2026-12-02T06:43:28.082071Z", "completed": true,
			"restoredTo": "2026-12-02T06:43:27.912345Z", "lsn": "0/5000060", "timeline": float64(2)}
		if diff := cmp.Diff(want, restoreOf(rsp)); diff != "" {
			t.Errorf("status.restore (-want +got):\n%s", diff)
		}
		if c := conditionOf(rsp, condRestored); c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE || !strings.Contains(c.GetMessage(), "committed at 2026-12-02T06:43:27.912345Z; timeline 2 starts at 0/5000060") {
			t.Errorf("Restored %v, want True naming the point reached", c)
		}
		// Recorded: the pods are not asked for again (one call).
		feedBack(t, req, rsp, true)
		again := runOnce(t, req)
		if again.GetRequirements().GetResources()[requirementInstances] != nil {
			t.Error("the instance pods still asked for once the restore is recorded")
		}
		if diff := cmp.Diff(restoreOf(rsp), restoreOf(again)); diff != "" {
			t.Errorf("the record changed (-before +after):\n%s", diff)
		}
	})
	// To the archive's end: the report says the segment the replay ended
	// in and the last one the archive held.
	for _, tc := range []struct {
		name, stoppedIn string
		gap             bool
	}{
		{"reached the archive's end", "00000002000000000000000C", false},
		{"the end on another timeline", "00000003000000000000000B", false},
		{"stopped at a gap", "000000020000000000000009", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ready(t)
			delete(structAt(req.Observed.Composite.Resource, "spec", "restoreFrom").Fields, "pointInTime")
			rep := `{"result":"restored","source":"ledger","restoredTo":"2026-12-02T06:43:27.912345Z","lsn":"0/9000060","timeline":2,"stoppedIn":"` + tc.stoppedIn + `","archiveEnd":"00000001000000000000000B","seconds":41}`
			rsp := runTestIn(t, req, withReport(t, req, rep))
			st := restoreOf(rsp)
			c := conditionOf(rsp, condRestored)
			var warned []string
			for _, r := range rsp.GetResults() {
				if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING {
					warned = append(warned, r.GetReason())
				}
			}
			if !tc.gap {
				if st["stoppedIn"] != nil || st["archiveEnd"] != nil || c.GetReason() != reasonRestoreSucceeded || len(warned) > 0 {
					t.Errorf("status.restore %v, Restored %v, warnings %v: want no gap", st, c, warned)
				}
				return
			}
			if st["stoppedIn"] != tc.stoppedIn || st["archiveEnd"] != "00000001000000000000000B" {
				t.Errorf("status.restore %v, want the gap's segments", st)
			}
			if c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE || c.GetReason() != reasonRestoreStoppedAtGap ||
				!strings.Contains(c.GetMessage(), "stopped in WAL segment "+tc.stoppedIn+", but the archive held segments up to 00000001000000000000000B") {
				t.Errorf("Restored %v, want True, StoppedAtGap, naming both segments", c)
			}
			if !slices.Equal(warned, []string{reasonRestoreStoppedAtGap}) {
				t.Errorf("warnings %v, want one StoppedAtGap", warned)
			}
			// Once the condition says it, no Warning again, and the record
			// (read back from status) keeps the gap.
			feedBack(t, req, rsp, true)
			writeConditions(t, req.Observed.Composite.Resource, rsp)
			again := runOnce(t, req)
			for _, r := range again.GetResults() {
				t.Errorf("a result again once recorded: %v", r)
			}
			if d := cmp.Diff(st, restoreOf(again)); d != "" {
				t.Errorf("the record changed (-before +after):\n%s", d)
			}
			if d := cmp.Diff(c, conditionOf(again, condRestored), protocmp.Transform()); d != "" {
				t.Errorf("Restored changed (-before +after):\n%s", d)
			}
		})
	}
	t.Run("lost", func(t *testing.T) {
		req := ready(t)
		rsp := runTestIn(t, req, withReport(t, req, "killed by the OOM killer"))
		st := restoreOf(rsp)
		if st["completed"] != true || st["restoredTo"] != nil || st["lsn"] != nil {
			t.Errorf("status.restore %v, want completed without a point", st)
		}
		if c := conditionOf(rsp, condRestored); c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE || !strings.Contains(c.GetMessage(), "was not reported") {
			t.Errorf("Restored %v, want True saying the point was not reported", c)
		}
	})
}

// TestArchiveRestore: a new Database restored from another's archive: the
// first primary gets the source's repository and the target in its
// ConfigMap until it has been ready, then status.restore records it.
func TestArchiveRestore(t *testing.T) {
	xr := yamlStruct(t, `apiVersion: example.com/v1
kind: Database
metadata: {name: ledger-copy, namespace: shop}
spec:
  version: "16"
  size: medium
  restoreFrom: {database: ledger, from: Archive, pointInTime: "2026-12-02T07:43:28.082071+01:00"}`)
	req := xrRequest(xr, compositionInput(t, "example/archive/composition.yaml"))
	rsp := runTest(t, req)
	cm := decodeInto[corev1.ConfigMap](t, rsp.GetDesired().GetResources()[string(rnScripts)].GetResource())
	want := map[string]string{keyRestoreRepo: "/prod/shop/ledger", keyRestoreSource: "ledger", keyRestoreTarget: "2026-12-02 06:43:28.082071+00"}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, cm.Data[k], v)
		}
	}
	if rsp.GetDesired().GetResources()[string(rnRestore)] != nil {
		t.Error("a restore Job composed for a restore from the archive")
	}
	if c := conditionOf(rsp, condRestored); c.GetReason() != reasonRestoreFromArchive {
		t.Errorf("Restored %v, want %s", c, reasonRestoreFromArchive)
	}
	// Ready once: restored.
	for range 3 {
		feedBack(t, req, rsp, true)
		rsp = runTest(t, req)
	}
	cm = decodeInto[corev1.ConfigMap](t, rsp.GetDesired().GetResources()[string(rnScripts)].GetResource())
	for k := range want {
		if _, ok := cm.Data[k]; ok {
			t.Errorf("ConfigMap keeps %s once the Database has been ready: a later start would restore over data", k)
		}
	}
	if c := conditionOf(rsp, condRestored); c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE || !strings.Contains(c.GetMessage(), "2026-12-02T06:43:28.082071Z") {
		t.Errorf("Restored %v, want True naming the point", c)
	}
	st := rsp.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["restore"].GetStructValue()
	if st.GetFields()["completed"].GetBoolValue() != true || st.GetFields()["pointInTime"].GetStringValue() != "2026-12-02T06:43:28.082071Z" || st.GetFields()["backup"].GetStringValue() != "archive" {
		t.Errorf("status.restore = %v", st)
	}
}

func TestArchiveRestoreInvalid(t *testing.T) {
	for _, tc := range []struct{ name, restore, input, field string }{
		{"a point in time of a volume backup", `{database: ledger, pointInTime: "2026-12-02T07:00:00Z"}`, "example/archive/composition.yaml", "spec.restoreFrom.pointInTime"},
		{"not a time", `{database: ledger, from: Archive, pointInTime: "yesterday"}`, "example/archive/composition.yaml", "spec.restoreFrom.pointInTime"},
		{"no archive in this Composition", `{database: ledger, from: Archive}`, "example/composition.yaml", "spec.restoreFrom.from"},
		{"an unknown source", `{database: ledger, from: Tape}`, "example/archive/composition.yaml", "spec.restoreFrom.from"},
		{"a volume backup of another namespace", `{database: ledger, namespace: prod}`, "example/archive/composition.yaml", "spec.restoreFrom.namespace"},
		{"not a namespace", `{database: ledger, namespace: Prod_1, from: Archive}`, "example/archive/composition.yaml", "spec.restoreFrom.namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xr := yamlStruct(t, "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: ledger-copy, namespace: shop}\nspec: {version: \"16\", size: small, restoreFrom: "+tc.restore+"}")
			assertFatal(t, tc.name, runTest(t, xrRequest(xr, compositionInput(t, tc.input))), tc.field)
		})
	}
}

// TestArchiveCrossNamespace: a Database restores another namespace's
// archive only where the platform's input has a rule for it; refused,
// nothing is composed (never an empty database where a restore was asked
// for); a restore done stays done when the rule goes.
func TestArchiveCrossNamespace(t *testing.T) {
	const xr = `apiVersion: example.com/v1
kind: Database
metadata: {name: ledger, namespace: shop-staging}
spec:
  version: "16"
  size: small
  restoreFrom: {database: ledger, namespace: shop, from: Archive}`
	withRules := func(t *testing.T, rules ...map[string]any) *structpb.Struct {
		in := compositionInput(t, "example/archive/composition.yaml")
		var l []any
		for _, r := range rules {
			l = append(l, r)
		}
		v, err := structpb.NewList(l)
		if err != nil {
			t.Fatal(err)
		}
		in.GetFields()["objectStorage"].GetStructValue().Fields["crossNamespaceRestores"] = structpb.NewListValue(v)
		return in
	}
	for _, tc := range []struct {
		name  string
		rules []map[string]any
		allow bool
	}{
		{"no rule", nil, false},
		{"a rule for another source", []map[string]any{{"from": "prod", "to": "*"}}, false},
		{"a rule for another destination", []map[string]any{{"from": "shop", "to": "shop-dev"}}, false},
		{"this pair", []map[string]any{{"from": "prod", "to": "*"}, {"from": "shop", "to": "shop-staging"}}, true},
		{"from anywhere", []map[string]any{{"from": "*", "to": "shop-staging"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rsp := runTest(t, xrRequest(yamlStruct(t, xr), withRules(t, tc.rules...)))
			if !tc.allow {
				assertFatal(t, tc.name, rsp, "crossNamespaceRestores")
				if n := len(rsp.GetDesired().GetResources()); n != 0 {
					t.Errorf("%d resources composed for a refused restore", n)
				}
				return
			}
			cm := decodeInto[corev1.ConfigMap](t, rsp.GetDesired().GetResources()[string(rnScripts)].GetResource())
			if got := cm.Data[keyRestoreRepo]; got != "/prod/shop/ledger" {
				t.Errorf("restore-repo %q, want the source namespace's /prod/shop/ledger", got)
			}
			if c := conditionOf(rsp, condRestored); !strings.Contains(c.GetMessage(), "the archive of shop/ledger (s3://pg-archive/prod/shop/ledger)") {
				t.Errorf("Restored %v, want it to name shop/ledger and its repository", c)
			}
		})
	}

	t.Run("a rule removed after the restore", func(t *testing.T) {
		req := xrRequest(yamlStruct(t, xr), withRules(t, map[string]any{"from": "shop", "to": "*"}))
		for range 2 {
			feedBack(t, req, runTest(t, req), true)
		}
		st := structAt(req.GetObserved().GetComposite().GetResource(), "status", "restore").AsMap()
		if st["completed"] != true || st["namespace"] != "shop" {
			t.Fatalf("status.restore %v, want completed from namespace shop", st)
		}
		req.Input = withRules(t)
		rsp := runTest(t, req)
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				t.Fatalf("a restore done refused when its rule went: %s", r.GetMessage())
			}
		}
		if c := conditionOf(rsp, condRestored); c.GetStatus() != fnv1.Status_STATUS_CONDITION_TRUE {
			t.Errorf("Restored %v", c)
		}
	})

	t.Run("a rule that is no namespace", func(t *testing.T) {
		rsp := runTest(t, xrRequest(yamlStruct(t, xr), withRules(t, map[string]any{"from": "Shop!", "to": "*"})))
		assertFatal(t, "invalid rule", rsp, "objectStorage.crossNamespaceRestores[0].from")
	})
}
