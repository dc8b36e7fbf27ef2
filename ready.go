package main

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
)

// readyRule tells whether the composed resource name is ready, from the
// observed state and the number of instances the Database wants.
type readyRule func(name resource.Name, o *observed, wantReplicas int32) bool

// readiness holds the function's readiness rule of every composed resource,
// by composition resource name. Core kinds have no Ready condition, so
// Crossplane's default rule would never turn them ready: every resource gets
// an explicit True or False. There is no default: a resource without a rule
// here is never ready, and TestComposedKindChecklist fails until it has one
// (a new kind, say a PgBouncer Deployment, must say when it is ready).
var readiness = map[resource.Name]readyRule{
	rnCredentials:     observedExists,
	rnSuperuser:       observedExists,
	rnObjectStorage:   observedExists,
	rnScripts:         observedExists,
	rnService:         observedExists,
	rnServiceRead:     observedExists,
	rnServiceHeadless: observedExists,
	rnPDB:             observedExists,
	rnNetworkPolicy:   observedExists,
	// A CronJob that has not run yet is ready: backup health is its own
	// condition (BackupHealthy), or a new Database would stay unready until
	// its first backup.
	rnBackup:       observedExists,
	rnArchiveCheck: observedExists,
	rnDrill:        observedExists,
	rnFullBackup:   observedExists,
	// Prometheus Operator kinds have no status to wait on: once they
	// exist, the operator reads them.
	rnPodMonitor:     observedExists,
	rnPrometheusRule: observedExists,
	rnStatefulSet: func(_ resource.Name, o *observed, want int32) bool {
		return statefulSetReady(o.StatefulSet, want)
	},
	rnRestore: func(_ resource.Name, o *observed, _ int32) bool {
		return jobSucceeded(o.Restore)
	},
	// Not ready while it runs: the Database has no primary then.
	rnFailover: func(_ resource.Name, o *observed, _ int32) bool {
		return jobSucceeded(o.Failover)
	},
}

// observedExists is the rule of kinds that work once they exist: Secrets,
// the ConfigMap, Services, the PDB, the NetworkPolicy.
func observedExists(name resource.Name, o *observed, _ int32) bool {
	return o.exists[name]
}

// ready is the readiness the function reports for a composed resource.
func ready(name resource.Name, o *observed, wantReplicas int32) fnv1.Ready {
	if rule, ok := readiness[name]; ok && rule(name, o, wantReplicas) {
		return fnv1.Ready_READY_TRUE
	}
	return fnv1.Ready_READY_FALSE
}

// readinessMap is the readiness of every desired resource.
type readinessMap map[resource.Name]fnv1.Ready

// readinessOf is ready for every desired resource (the StatefulSet is
// always one: compose).
func readinessOf(desired map[resource.Name]any, o *observed, wantReplicas int32) readinessMap {
	rd := make(readinessMap, len(desired))
	for name := range desired {
		rd[name] = ready(name, o, wantReplicas)
	}
	return rd
}

// all is true when every composed resource is ready by the function's own
// rules: what Crossplane's Ready condition of the XR then says too.
func (rd readinessMap) all() bool {
	for _, r := range rd {
		if r != fnv1.Ready_READY_TRUE {
			return false
		}
	}
	return true
}

// statefulSetReady holds when the controller has seen the current spec, every
// wanted instance runs the current revision and is ready.
func statefulSetReady(sts *appsv1.StatefulSet, want int32) bool {
	if sts == nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != want {
		return false
	}
	s := sts.Status
	if sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		// Updates deferred (roll.go): instances on an older template serve
		// until their next restart, and the controller never moves
		// currentRevision under OnDelete.
		return s.ObservedGeneration >= sts.Generation && s.Replicas == want && s.ReadyReplicas == want
	}
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
