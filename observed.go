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

	// RestoreRecord is the observed XR's status.restore, and Source what
	// Crossplane's required resources say of the restoreFrom source: the
	// restore's memory and its source (restore.go). readObserved leaves
	// them empty; RunFunction reads them from the request.
	RestoreRecord *restoreStatus
	Source        sourceLookup

	// exists records every composed resource Crossplane observed.
	exists map[resource.Name]bool
}

// readObserved decodes the observed composed resources this function reads.
func readObserved(rs map[string]*fnv1.Resource) (*observed, error) {
	o := &observed{exists: make(map[resource.Name]bool, len(rs))}
	for name, r := range rs {
		if r.GetResource() != nil {
			o.exists[resource.Name(name)] = true
		}
	}
	var errs [6]error
	o.Credentials, errs[0] = decodeAs[corev1.Secret](rs, rnCredentials, secretFields)
	o.Superuser, errs[1] = decodeAs[corev1.Secret](rs, rnSuperuser, secretFields)
	o.Scripts, errs[2] = decodeAs[corev1.ConfigMap](rs, rnScripts, configMapFields)
	o.StatefulSet, errs[3] = decodeAs[appsv1.StatefulSet](rs, rnStatefulSet, statefulSetFields)
	o.Backup, errs[4] = decodeAs[batchv1.CronJob](rs, rnBackup, wire.Whole)
	o.Restore, errs[5] = decodeAs[batchv1.Job](rs, rnRestore, wire.Whole)
	return o, errors.Join(errs[:]...)
}

// The projections of the big objects: the fields the function reads. A
// field left out reads as unset, so only objects too big to decode whole are
// projected (a StatefulSet is hundreds of fields, the ConfigMap carries every
// script); the small ones (the CronJob, the restore Job) are decoded whole
// (wire.Whole): their every field reads as the cluster has it (a CronJob's
// spec.suspend once read nil when it was true).
var (
	secretFields    = wire.Fields{"data": nil}
	configMapFields = wire.Fields{"data": {keyInitialized: nil}}
	// Every field of the StatefulSet that makePlan, ready and status read.
	statefulSetFields = wire.Fields{
		"metadata": {"generation": nil, "annotations": {annotationMajor: nil}},
		"spec": {
			"replicas": nil,
			"template": {"spec": {"containers": {"name": nil, "image": nil}}},
			"volumeClaimTemplates": {
				"metadata": {"name": nil},
				"spec":     {"resources": nil, "storageClassName": nil},
			},
		},
		"status": nil,
	}
)

// decodeAs decodes one observed composed resource, projected by f (every
// field with wire.Whole), into its typed kind, or returns nil when
// Crossplane has not observed it.
func decodeAs[T any, PT interface {
	*T
	runtime.Object
}](rs map[string]*fnv1.Resource, name resource.Name, f wire.Fields) (*T, error) {
	r := rs[string(name)].GetResource()
	if r == nil {
		return nil, nil
	}
	out := PT(new(T))
	if err := wire.Decode(r, f, out); err != nil {
		return nil, fmt.Errorf("cannot decode observed composed resource %q: %w", name, err)
	}
	return out, nil
}
