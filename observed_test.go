package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// observedOf is objs as the function reads them: encoded into a request's
// observed composed resources, as Crossplane sends them, and decoded by
// readObserved. Tests build observed state this way, never by hand, so that
// what a rule reads is what the decoding really gives it (a projection that
// left a field out once made spec.suspend read nil).
func observedOf(t testing.TB, objs map[resource.Name]runtime.Object) *observed {
	t.Helper()
	rs := make(map[string]*fnv1.Resource, len(objs))
	for name, obj := range objs {
		rs[string(name)] = encodeObserved(t, obj)
	}
	o, err := readObserved(rs)
	if err != nil {
		t.Fatalf("readObserved: %v", err)
	}
	return o
}

// TestReadObservedWhole: the restore Job comes back whole, every field as the
// cluster has it but managedFields, and the CronJob too but its job template
// (a pod template the function composes and never reads); the big ones
// (StatefulSet, ConfigMap, Secrets) only in the fields the function reads.
func TestReadObservedWhole(t *testing.T) {
	at := metav1.NewTime(metav1.Now().UTC().Truncate(1e9))
	cronJob := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders-backup", Namespace: "shop", Generation: 3, Labels: map[string]string{labelInstance: "orders"}},
		Spec: batchv1.CronJobSpec{
			Schedule:          "0 2 * * *",
			Suspend:           ptr.To(true),
			ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](2),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "backup", Image: "postgres:16"}},
				}},
			}},
		},
		Status: batchv1.CronJobStatus{LastScheduleTime: &at, LastSuccessfulTime: &at},
	}
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders-restore", Namespace: "shop", Annotations: map[string]string{annotationRestoreHash: "abc", annotationRestoreAttempt: "2"}},
		Spec: batchv1.JobSpec{
			Suspend:               ptr.To(false),
			ActiveDeadlineSeconds: ptr.To[int64](3600),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "restore", Image: "postgres:16", Env: []corev1.EnvVar{{Name: "RESTORE_BACKUP", Value: "latest"}}}},
			}},
		},
		Status: batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	sts := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Generation: 2, Labels: map[string]string{labelInstance: "orders"}},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), ServiceName: "orders-hl"},
		Status:     appsv1.StatefulSetStatus{ReadyReplicas: 2},
	}
	// The API server's bookkeeping is left out: no rule reads it.
	observedCronJob := cronJob.DeepCopy()
	observedCronJob.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "apiextensions.crossplane.io/composed", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "batch/v1"}}
	o := observedOf(t, map[resource.Name]runtime.Object{rnBackup: observedCronJob, rnRestore: job, rnStatefulSet: sts})

	wantCronJob := cronJob.DeepCopy()
	wantCronJob.Spec.JobTemplate = batchv1.JobTemplateSpec{}
	if d := cmp.Diff(wantCronJob, o.Backup); d != "" {
		t.Errorf("the CronJob is not decoded whole but its job template (-observed +read):\n%s", d)
	}
	if !ptr.Deref(o.Backup.Spec.Suspend, false) {
		t.Errorf("the CronJob's spec.suspend true reads %v", o.Backup.Spec.Suspend)
	}
	if d := cmp.Diff(job, o.Restore); d != "" {
		t.Errorf("the restore Job is not decoded whole (-observed +read):\n%s", d)
	}
	// The StatefulSet is projected: what is read is there, the rest is not.
	want := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2)},
		Status:     appsv1.StatefulSetStatus{ReadyReplicas: 2},
	}
	if d := cmp.Diff(want, o.StatefulSet); d != "" {
		t.Errorf("the StatefulSet's projection (-want +read):\n%s", d)
	}
	if d := cmp.Diff(map[resource.Name]bool{rnBackup: true, rnRestore: true, rnStatefulSet: true}, o.exists); d != "" {
		t.Errorf("exists (-want +got):\n%s", d)
	}
}
