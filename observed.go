package main

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
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
	// them empty; RunFunction reads them from the request.
	RestoreRecord *restoreStatus
	Source        sourceLookup
	// FailoverRecord is status.failover; Instances and FailoverOutcome
	// what the required resources say of the instance pods and of the
	// failover Job's pod (failover.go). Read from the request, as above.
	FailoverRecord  *failoverRecord
	Instances       instancePods
	FailoverOutcome failoverOutcome

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
	var errs [7]error
	o.Credentials, errs[0] = decodeAs[corev1.Secret](rs, rnCredentials, secretFields)
	o.Superuser, errs[1] = decodeAs[corev1.Secret](rs, rnSuperuser, secretFields)
	o.Scripts, errs[2] = decodeAs[corev1.ConfigMap](rs, rnScripts, configMapFields)
	o.StatefulSet, errs[3] = decodeAs[appsv1.StatefulSet](rs, rnStatefulSet, statefulSetFields)
	o.Backup, errs[4] = decodeAs[batchv1.CronJob](rs, rnBackup, whole)
	o.Restore, errs[5] = decodeAs[batchv1.Job](rs, rnRestore, whole)
	o.Failover, errs[6] = decodeAs[batchv1.Job](rs, rnFailover, whole)
	return o, errors.Join(errs[:]...)
}

// fields is a projection: the parts of an observed object the function
// reads. A nil subtree takes the whole value; a projection applied to a list
// applies to each element. Decoding only these is most of the speed of a
// request with full observed state (a StatefulSet is hundreds of fields, the
// ConfigMap carries every script). A field left out of a projection reads as
// unset, so a projection is kept for the big objects only, and the small ones
// (the CronJob, the restore Job) are decoded whole: their every field reads as
// the cluster has it (a CronJob's spec.suspend once read nil when it was true).
type fields map[string]fields

// whole is no projection: decodeAs decodes the whole object (wholeObject).
var whole fields

var (
	secretFields    = fields{"data": nil}
	configMapFields = fields{"data": {keyInitialized: nil, keyPrimary: nil}}
	// Every field of the StatefulSet that makePlan, ready and status read.
	statefulSetFields = fields{
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

// project copies the projected parts of s into plain Go values.
func project(s *structpb.Struct, f fields) map[string]any {
	out := make(map[string]any, len(f))
	for k, sub := range f {
		v, ok := s.GetFields()[k]
		if !ok {
			continue
		}
		out[k] = projectValue(v, sub)
	}
	return out
}

func projectValue(v *structpb.Value, f fields) any {
	if f == nil {
		return v.AsInterface()
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return project(k.StructValue, f)
	case *structpb.Value_ListValue:
		l := make([]any, 0, len(k.ListValue.GetValues()))
		for _, e := range k.ListValue.GetValues() {
			l = append(l, projectValue(e, f))
		}
		return l
	}
	return v.AsInterface()
}

// wholeObject is every field of s but metadata.managedFields: the API
// server's record of who applied what, which no rule reads and which in a
// cluster is often as large as the spec.
func wholeObject(s *structpb.Struct) map[string]any {
	out := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		md := v.GetStructValue()
		if k != "metadata" || md == nil {
			out[k] = v.AsInterface()
			continue
		}
		meta := make(map[string]any, len(md.GetFields()))
		for mk, mv := range md.GetFields() {
			if mk != "managedFields" {
				meta[mk] = mv.AsInterface()
			}
		}
		out[k] = meta
	}
	return out
}

// decodeAs decodes the projected fields (all of them with whole) of one
// observed composed resource into its typed kind, or returns nil when
// Crossplane has not observed it.
func decodeAs[T any, PT interface {
	*T
	runtime.Object
}](rs map[string]*fnv1.Resource, name resource.Name, f fields) (*T, error) {
	r := rs[string(name)].GetResource()
	if r == nil {
		return nil, nil
	}
	var m map[string]any
	if f == nil {
		m = wholeObject(r)
	} else {
		m = project(r, f)
	}
	if err := guardQuantities(m); err != nil {
		return nil, fmt.Errorf("cannot decode observed composed resource %q: %w", name, err)
	}
	out := PT(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, out); err != nil {
		return nil, fmt.Errorf("cannot decode observed composed resource %q: %w", name, err)
	}
	return out, nil
}

// guardQuantities rejects resource quantities (values of requests and
// limits) that ParseQuantity would spend minutes on, e.g. "1e-999999999" in
// a hand-written observed file (found by fuzzing); a real API server only
// stores canonical quantities.
func guardQuantities(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "requests" || k == "limits" {
				if q, ok := e.(map[string]any); ok {
					for n, s := range q {
						if str, ok := s.(string); ok && (len(str) > 64 || hugeExponent.MatchString(str)) {
							return fmt.Errorf("%s.%s: %q is not a quantity the API server would store", k, n, str)
						}
					}
				}
			}
			if err := guardQuantities(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := guardQuantities(e); err != nil {
				return err
			}
		}
	}
	return nil
}
