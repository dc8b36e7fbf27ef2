package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// One home for the one-shot Jobs (the restore, restore.go; the failover and
// the switchover, failover.go; the drills and upgrades to come). A Job is one
// run and its pod template is immutable, so every one-shot Job lives the same
// life, which this file holds once:
//
//  1. composed once, from what the plan decided (oneShotJob builds it from a
//     oneShot description, as cronJob does for the CronJobs);
//  2. frozen: while it exists it is composed again from what it was created
//     with, read back from the observed Job (frozenImage, frozenEnv), never
//     from the spec, the input or the state of now, so nothing ever patches
//     an immutable template mid-run;
//  3. its outcome read: the Job's conditions (jobSucceeded, jobFailed,
//     jobFailure and the exit code of a final failure, jobExitCode) and,
//     for a kind that reports more, its pod's termination message through
//     Crossplane's required resources (termination.go decodeReport);
//  4. recorded in the XR's status, which the function reads back on the
//     next reconcile as the durable memory of the run;
//  5. dropped once the record is read back (or at once, for a kind whose
//     rerun is a no-op): Crossplane deletes the Job.
//
// stageOf says where an observed Job stands in that life; each kind decides
// what each stage means for its condition and its record. How to add a kind:
// docs/maintainers.md, "How to add a one-shot Job" (TestOneShotChecklist).

// oneShot is what sets one one-shot Job apart from the others; oneShotJob
// builds the rest the same way for all.
type oneShot struct {
	name, component string
	annotations     map[string]string
	// retries is the Job's backoffLimit: pods that may fail before the Job
	// does (a pod lost with its node is retried).
	retries int32
	// deadline bounds the whole run, retries and time pending included.
	deadline time.Duration
	// evictionFree: a pod evicted (a drain, a preemption) is not counted
	// against retries.
	evictionFree bool
	// finalExits are exit codes of the container that no retry of the
	// same run can change: the Job fails at once, and jobExitCode reads
	// the code back from its Failed condition.
	finalExits []int32
	affinity   *corev1.Affinity
	container  corev1.Container
	volumes    []corev1.Volume
}

// oneShotJob is the Job s describes, in the Database's namespace, its pods
// labelled with s's component, run once (restartPolicy Never) under the pod
// defaults of every pod the function composes.
func oneShotJob(db *database, s oneShot) *batchv1.Job {
	var policy *batchv1.PodFailurePolicy
	if s.evictionFree || len(s.finalExits) > 0 {
		policy = &batchv1.PodFailurePolicy{}
	}
	if s.evictionFree {
		policy.Rules = append(policy.Rules, batchv1.PodFailurePolicyRule{
			Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
			},
		})
	}
	if len(s.finalExits) > 0 {
		policy.Rules = append(policy.Rules, batchv1.PodFailurePolicyRule{
			Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To(s.container.Name), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: s.finalExits,
			},
		})
	}
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.name,
			Namespace:   db.Namespace,
			Labels:      labels(db, s.component),
			Annotations: s.annotations,
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To(s.retries),
			ActiveDeadlineSeconds: ptr.To(int64(s.deadline / time.Second)),
			PodFailurePolicy:      policy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(db, s.component)},
				Spec: podSpecDefaults(corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Affinity:      s.affinity,
					Containers:    []corev1.Container{s.container},
					Volumes:       s.volumes,
				}),
			},
		},
	}
}

// jobStage is where an observed one-shot Job stands in its life.
type jobStage int

const (
	// stageAbsent: no Job observed; the kind composes a new one if the
	// plan wants one.
	stageAbsent jobStage = iota
	// stageRecorded: the kind's record, read back from the XR, already
	// holds this Job's outcome: drop it.
	stageRecorded
	// stageRunning: neither succeeded nor failed: compose it frozen.
	stageRunning
	// stageReading: succeeded, but the outcome its pod reports has not
	// been read yet (Crossplane has not answered the requirement): compose
	// it frozen and ask for its pods.
	stageReading
	// stageSucceeded: succeeded, the outcome in hand: record it.
	stageSucceeded
	// stageFailed: failed (retries or the deadline spent, or a final exit
	// code): the kind records it or holds it for the user.
	stageFailed
)

// stageOf is the stage of the observed Job j (nil: none). recorded: the
// kind's record read back holds j's outcome; reported: the outcome j's pod
// reports has been read (true for a kind that reads only the Job's
// conditions).
func stageOf(j *batchv1.Job, recorded, reported bool) jobStage {
	switch {
	case recorded:
		return stageRecorded
	case j == nil:
		return stageAbsent
	case jobSucceeded(j) && !reported:
		return stageReading
	case jobSucceeded(j):
		return stageSucceeded
	case jobFailed(j):
		return stageFailed
	}
	return stageRunning
}

// frozenImage is the image the observed Job's container named container
// runs (any container's when container is empty), fallback when it says
// none: a minor roll or an input image change never rewrites the template of
// a Job that runs.
func frozenImage(j *batchv1.Job, container, fallback string) string {
	for _, c := range j.Spec.Template.Spec.Containers {
		if (container == "" || c.Name == container) && c.Image != "" {
			return c.Image
		}
	}
	return fallback
}

// frozenEnv is the literal value of the environment variable name in the
// observed Job's containers; false when none sets it (a Job composed before
// the variable existed goes on without it).
func frozenEnv(j *batchv1.Job, name string) (string, bool) {
	for _, c := range j.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom == nil {
				return e.Value, true
			}
		}
	}
	return "", false
}

// frozenContainerEnv is the whole environment of the observed Job's
// container named container, as it was composed (nil when it has none): for
// a kind whose Job, once created, runs to its end whatever changes (the
// failover), the environment of now must not reach its immutable template.
func frozenContainerEnv(j *batchv1.Job, container string) []corev1.EnvVar {
	for _, c := range j.Spec.Template.Spec.Containers {
		if c.Name == container && len(c.Env) > 0 {
			return c.Env
		}
	}
	return nil
}

// jobFailure is the observed Job's Failed condition (empty when it has
// none).
func jobFailure(j *batchv1.Job) batchv1.JobCondition {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return batchv1.JobCondition{}
}

// exitCode finds the exit code in the message of a Job's Failed condition
// set by its podFailurePolicy ("Container restore for pod ns/pod failed with
// exit code 3 matching FailJob rule at index 1").
var exitCode = regexp.MustCompile(`failed with exit code ([0-9]+)`)

// jobExitCode is the exit code that failed the Job at once through a
// oneShot's finalExits; 0 when its failure was anything else.
func jobExitCode(j *batchv1.Job) int {
	c := jobFailure(j)
	if m := exitCode.FindStringSubmatch(c.Message); c.Reason == batchv1.JobReasonPodFailurePolicy && m != nil {
		code, _ := strconv.Atoi(m[1])
		return code
	}
	return 0
}

// jobHash is a hash of the Job as composed (before the hash annotation is
// set): equal hashes, equal Jobs. A kind that replaces its Job when the run
// asked for changes (the restore) compares it with the observed Job's.
// encoding/json writes struct fields in declaration order and map keys
// sorted, so it is stable for one build.
func jobHash(j *batchv1.Job) string {
	b, err := json.Marshal(j)
	if err != nil {
		// Never for these types; an empty hash matches no Job, so the
		// worst case is a replaced Job, never a patched one.
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
