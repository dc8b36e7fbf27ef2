package main

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// ready is the function's own readiness rule for a composed resource. Core
// kinds have no Ready condition, so Crossplane's default rule would never
// turn them ready: every resource gets an explicit True or False.
func ready(name resource.Name, o *observed, wantReplicas int32) fnv1.Ready {
	var ok bool
	switch name {
	case rnStatefulSet:
		ok = statefulSetReady(o.StatefulSet, wantReplicas)
	case rnRestore:
		ok = jobSucceeded(o.Restore)
	case rnFailover:
		// Not ready while it runs: the Database has no primary then.
		ok = jobSucceeded(o.Failover)
	default:
		// Secrets, ConfigMap, Services, PDB, NetworkPolicy and the CronJob
		// are ready once they exist. A CronJob that has not run yet is
		// ready: backup health is its own condition, or a new Database
		// would stay unready until its first backup.
		ok = o.exists[name]
	}
	if ok {
		return fnv1.Ready_READY_TRUE
	}
	return fnv1.Ready_READY_FALSE
}

// statefulSetReady holds when the controller has seen the current spec, every
// wanted instance runs the current revision and is ready.
func statefulSetReady(sts *appsv1.StatefulSet, want int32) bool {
	if sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != want {
		return false
	}
	s := sts.Status
	return s.ObservedGeneration >= sts.Generation &&
		s.Replicas == want &&
		s.ReadyReplicas == want &&
		s.UpdatedReplicas == want &&
		s.CurrentRevision == s.UpdateRevision
}

func jobSucceeded(j *batchv1.Job) bool {
	return j != nil && jobCondition(j, batchv1.JobComplete)
}

func jobFailed(j *batchv1.Job) bool {
	return j != nil && jobCondition(j, batchv1.JobFailed)
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
