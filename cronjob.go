package main

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// scheduled is what sets one of the Database's CronJobs apart from the
// others (the volume backup, backup.go; the archive check, archive.go; the
// restore drill, drill.go). Every one runs one script in one container,
// never two runs at once (concurrencyPolicy Forbid: two runs would race on
// what they touch or double the load), under the pod defaults of every pod
// the function composes; cronJob builds the rest the same way for all.
type scheduled struct {
	name, component, schedule string
	// startingDeadline is how late a missed run may still start, seconds.
	startingDeadline int64
	// history is how many succeeded and how many failed Jobs are kept.
	history int32
	// attempts is how many pods a run may try; the checks try once, so a
	// failure reaches the CronJob's status instead of being retried away.
	attempts int32
	// activeDeadline stops a run that hangs, seconds: the CronJob's active
	// list empties and the condition that reads it can say so.
	activeDeadline int64
	affinity       *corev1.Affinity
	container      corev1.Container
	volumes        []corev1.Volume
}

// cronJob is the CronJob s describes, in the Database's namespace, its
// Jobs and pods labelled with s's component.
func cronJob(db *database, s scheduled) *batchv1.CronJob {
	l := labels(db, s.component)
	return &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: db.Namespace, Labels: l},
		Spec: batchv1.CronJobSpec{
			Schedule:                   s.schedule,
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			StartingDeadlineSeconds:    ptr.To(s.startingDeadline),
			SuccessfulJobsHistoryLimit: ptr.To(s.history),
			FailedJobsHistoryLimit:     ptr.To(s.history),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: batchv1.JobSpec{
					BackoffLimit:          ptr.To(s.attempts - 1),
					ActiveDeadlineSeconds: ptr.To(s.activeDeadline),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: l},
						Spec: podSpecDefaults(corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Affinity:      s.affinity,
							Containers:    []corev1.Container{s.container},
							Volumes:       s.volumes,
						}),
					},
				},
			},
		},
	}
}

// scriptContainer runs script from the scripts volume in the Database's
// image, with the pod defaults' security context.
func scriptContainer(name, image, script string, env []corev1.EnvVar, res corev1.ResourceRequirements, mounts []corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"bash", scriptsDir + "/" + script},
		Env:             env,
		Resources:       res,
		VolumeMounts:    mounts,
		SecurityContext: containerSecurityContext(),
	}
}

// sqlScriptPod is the container and volumes of a pod that only talks SQL to
// the primary (the archive check, the full backup's request): a script, a
// scratch /tmp, small resources.
func sqlScriptPod(name, image, script string, env []corev1.EnvVar, db *database) (corev1.Container, []corev1.Volume) {
	c := scriptContainer(name, image, script, env,
		corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		[]corev1.VolumeMount{
			{Name: volScripts, MountPath: scriptsDir, ReadOnly: true},
			{Name: volTmp, MountPath: tmpDir},
		})
	return c, []corev1.Volume{
		scriptsVolume(db),
		{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
}
