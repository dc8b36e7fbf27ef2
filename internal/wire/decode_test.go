package wire

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDecode(t *testing.T) {
	observed := map[string]any{
		"apiVersion": "batch/v1", "kind": "CronJob",
		"metadata": map[string]any{
			"name": "orders-backup", "generation": 2.0,
			"managedFields": []any{map[string]any{"manager": "crossplane", "operation": "Apply"}},
		},
		"spec": map[string]any{
			"schedule": "0 2 * * *", "suspend": true,
			"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{
					map[string]any{"name": "backup", "image": "postgres:16", "resources": map[string]any{"requests": map[string]any{"cpu": "100m"}}},
				},
			}}}},
		},
		"status": map[string]any{"active": []any{map[string]any{"name": "job"}}},
	}
	whole := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "orders-backup", Generation: 2},
		Spec: batchv1.CronJobSpec{
			Schedule: "0 2 * * *", Suspend: ptr.To(true),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "backup", Image: "postgres:16", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
			}}}},
		},
		Status: batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "job"}}},
	}
	cases := map[string]struct {
		reason  string
		edit    func(m map[string]any)
		f       Projection
		want    *batchv1.CronJob
		wantErr string
	}{
		"Whole": {reason: "every field but managedFields", f: Whole, want: whole},
		"Projected": {
			reason: "only the projected fields; a projection applies to each element of a list",
			f:      Fields{"metadata": {"generation": nil}, "spec": {"suspend": nil, "jobTemplate": {"spec": {"template": {"spec": {"containers": {"name": nil}}}}}}},
			want: &batchv1.CronJob{
				ObjectMeta: metav1.ObjectMeta{Generation: 2},
				Spec: batchv1.CronJobSpec{Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "backup"}},
				}}}}},
			},
		},
		"Omitted": {
			reason: "every field but those named, through lists too, and never managedFields",
			f:      Omit{"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": {"resources": nil}}}}}}, "status": nil},
			want: func() *batchv1.CronJob {
				c := whole.DeepCopy()
				c.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
				c.Status = batchv1.CronJobStatus{}
				return c
			}(),
		},
		"UnsafeQuantity": {
			reason: "a quantity ParseQuantity would spend minutes on is refused",
			edit: func(m map[string]any) {
				c := m["spec"].(map[string]any)["jobTemplate"].(map[string]any)["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any) //nolint:forcetypeassert // built above
				c["resources"] = map[string]any{"limits": map[string]any{"memory": "1e-999999999"}}
			},
			f:       Whole,
			wantErr: `limits.memory: "1e-999999999" is not a quantity the API server would store`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := deepCopy(observed)
			if tc.edit != nil {
				tc.edit(m)
			}
			s, err := structpb.NewStruct(m)
			if err != nil {
				t.Fatal(err)
			}
			got := &batchv1.CronJob{}
			err = Decode(s, tc.f, got)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: error %v, want %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

func TestUnsafeQuantity(t *testing.T) {
	cases := map[string]bool{"20Gi": false, "500m": false, "1e3": false, "1e-999999999": true, "1E100": true, strings.Repeat("1", 65): true}
	for s, want := range cases {
		if got := UnsafeQuantity(s); got != want {
			t.Errorf("UnsafeQuantity(%q) = %v, want %v", s, got, want)
		}
	}
}

func deepCopy(m map[string]any) map[string]any {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s.AsMap()
}
