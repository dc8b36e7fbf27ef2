package main

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"

	"github.com/example/function-database/internal/wire"
)

// observed holds the observed composed resources the function reads back:
// state that must survive (passwords, volume templates, the running major)
// and the status that readiness and the XR's status are derived from.
type observed struct {
	Credentials *corev1.Secret
	Superuser   *corev1.Secret
	Scripts     *corev1.ConfigMap
	StatefulSet *appsv1.StatefulSet
	Backup      *batchv1.CronJob
	Restore     *batchv1.Job
	Failover    *batchv1.Job

	// RestoreRecord is the observed XR's status.restore, and Source what
	// Crossplane's required resources say of the restoreFrom source: the
	// restore's memory and its source (restore.go). readObserved leaves
	// them empty; readRequest reads them from the request.
	RestoreRecord *restoreStatus
	// RestoreReport is what the first primary of a restore from the
	// archive reported (its termination message), read from the instance
	// pods when they were asked for.
	RestoreReport restoreReport
	Source        sourceLookup
	// FailoverRecord is status.failover; Instances and FailoverOutcome
	// what the required resources say of the instance pods and of the
	// failover Job's pod (failover.go). Read from the request, as above.
	FailoverRecord  *failoverRecord
	RollRecord      *rollRecord
	Instances       instancePods
	FailoverOutcome failoverOutcome
	// ObjectStorageSource is what the required resources say of the
	// platform's object storage Secret; ObjectStorage the observed copy.
	ObjectStorageSource objectStorageLookup
	ObjectStorage       *corev1.Secret
	// ArchiveCheck is the observed archive check CronJob (archive.go),
	// FullBackup the full backup CronJob (fullbackup.go).
	ArchiveCheck *batchv1.CronJob
	FullBackup   *batchv1.CronJob
	// Drill is the observed restore drill CronJob; DrillRecord the XR's
	// status.drill and DrillOutcome what the required resources say of
	// the drill's pods (drill.go). Read from the request, as above.
	Drill        *batchv1.CronJob
	DrillRecord  *drillRecord
	DrillOutcome drillOutcome

	// exists records every composed resource Crossplane observed.
	exists map[resource.Name]bool
}

// readRequest is the one read stage: everything the function knows of the
// world, decoded once into one typed view before any decision. The observed
// composed resources (readObserved); the function's own records, read back
// from the observed XR's status (the restore's, the failover's, the roll's,
// the drill's); what Crossplane's required resources say (the restore's
// source, the instance pods, the restore's and the failover Job's reports,
// the platform's object storage Secret, the drill's pods). When the pods were
// not asked for, the StatefulSet's status may settle their readiness
// (settledInstances: a healthy Database costs one call).
func readRequest(req *fnv1.RunFunctionRequest, db *database) (*observed, error) {
	o, err := readObserved(req.GetObserved().GetResources())
	if err != nil {
		return nil, err
	}
	xr := req.GetObserved().GetComposite().GetResource()
	o.RestoreRecord = readRestoreRecord(xr)
	o.FailoverRecord = readFailoverRecord(xr)
	o.RollRecord = readRollRecord(xr)
	o.DrillRecord = readDrillRecord(xr)

	o.Source = lookupSource(req)
	o.Instances = lookupInstances(req)
	if !o.Instances.Resolved {
		o.Instances = settledInstances(db, o.StatefulSet)
	}
	o.RestoreReport = lookupRestoreReport(req, podName(db, 0))
	o.FailoverOutcome = lookupFailoverOutcome(req)
	o.ObjectStorageSource = lookupObjectStorage(req)
	if o.Drill != nil && o.Drill.Status.LastScheduleTime != nil {
		o.DrillOutcome = lookupDrillOutcome(req, o.Drill.Status.LastScheduleTime.Time)
	}
	return o, nil
}

// readObserved decodes the observed composed resources this function reads.
func readObserved(rs map[string]*fnv1.Resource) (*observed, error) {
	o := &observed{exists: make(map[resource.Name]bool, len(rs))}
	for name, r := range rs {
		if r.GetResource() != nil {
			o.exists[resource.Name(name)] = true
		}
	}
	var errs [11]error
	o.Credentials, errs[0] = decodeAs[corev1.Secret](rs, rnCredentials, secretFields)
	o.Superuser, errs[1] = decodeAs[corev1.Secret](rs, rnSuperuser, secretFields)
	o.Scripts, errs[2] = decodeAs[corev1.ConfigMap](rs, rnScripts, configMapFields)
	o.StatefulSet, errs[3] = decodeAs[appsv1.StatefulSet](rs, rnStatefulSet, statefulSetFields)
	o.Backup, errs[4] = decodeAs[batchv1.CronJob](rs, rnBackup, cronJobFields)
	o.Restore, errs[5] = decodeAs[batchv1.Job](rs, rnRestore, wire.Whole)
	o.Failover, errs[6] = decodeAs[batchv1.Job](rs, rnFailover, wire.Whole)
	o.ObjectStorage, errs[7] = decodeAs[corev1.Secret](rs, rnObjectStorage, objectStorageFields)
	o.ArchiveCheck, errs[8] = decodeAs[batchv1.CronJob](rs, rnArchiveCheck, cronJobFields)
	o.Drill, errs[9] = decodeAs[batchv1.CronJob](rs, rnDrill, cronJobFields)
	o.FullBackup, errs[10] = decodeAs[batchv1.CronJob](rs, rnFullBackup, cronJobFields)
	return o, errors.Join(errs[:]...)
}

// The projections: what the function reads of each observed object. A field
// left out reads as unset (a CronJob's spec.suspend once read nil when it was
// true), so only objects too big to decode whole are projected to the fields
// the function reads (wire.Fields: a StatefulSet is hundreds of fields, the
// ConfigMap carries every script); the others are decoded whole
// (wire.Whole), or whole but a big part no rule reads (wire.Omit).
var (
	// The CronJob's job template is a whole pod template, which the function
	// composes itself and never reads back; decoding it would add a third to
	// the CPU of a request with full observed state (notes/issue-14.md).
	// Every other field reads as the cluster has it.
	cronJobFields = wire.Omit{"spec": {"jobTemplate": nil}}
	secretFields  = wire.Fields{"data": nil, "metadata": {"resourceVersion": nil}}
	// The copy of the platform's object storage Secret: its keys and where
	// they came from.
	objectStorageFields = wire.Fields{"data": nil, "metadata": {"annotations": {annotationObjectStorageSource: nil}}}
	configMapFields     = wire.Fields{"data": {keyInitialized: nil, keyPrimary: nil}}
	// Every field of the StatefulSet that makePlan, ready and status read.
	statefulSetFields = wire.Fields{
		"metadata": {"generation": nil, "annotations": {annotationMajor: nil}},
		"spec": {
			"replicas":            nil,
			"podManagementPolicy": nil,
			// The supervised roll's partition (roll.go).
			"updateStrategy": {"type": nil, "rollingUpdate": {"partition": nil}},
			"template": {"spec": {
				"containers": {"name": nil, "image": nil},
				// plan.SpreadRequired: whether it requires a node each.
				"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"topologyKey": nil}}},
			}},
			"volumeClaimTemplates": {
				"metadata": {"name": nil},
				"spec":     {"resources": nil, "storageClassName": nil},
			},
		},
		"status": nil,
	}
)

// decodeAs decodes one observed composed resource, projected by p, into its
// typed kind, or returns nil when Crossplane has not observed it.
func decodeAs[T any, PT interface {
	*T
	runtime.Object
}](rs map[string]*fnv1.Resource, name resource.Name, p wire.Projection) (*T, error) {
	r := rs[string(name)].GetResource()
	if r == nil {
		return nil, nil
	}
	out := PT(new(T))
	if err := wire.Decode(r, p, out); err != nil {
		return nil, fmt.Errorf("cannot decode observed composed resource %q: %w", name, err)
	}
	return out, nil
}
