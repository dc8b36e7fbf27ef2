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
	o.Credentials, errs[0] = decodeAs[corev1.Secret](rs, rnCredentials)
	o.Superuser, errs[1] = decodeAs[corev1.Secret](rs, rnSuperuser)
	o.Scripts, errs[2] = decodeAs[corev1.ConfigMap](rs, rnScripts)
	o.StatefulSet, errs[3] = decodeAs[appsv1.StatefulSet](rs, rnStatefulSet)
	o.Backup, errs[4] = decodeAs[batchv1.CronJob](rs, rnBackup)
	o.Restore, errs[5] = decodeAs[batchv1.Job](rs, rnRestore)
	return o, errors.Join(errs[:]...)
}

// decodeAs decodes one observed composed resource into its typed kind, or
// returns nil when Crossplane has not observed it.
func decodeAs[T any, PT interface {
	*T
	runtime.Object
}](rs map[string]*fnv1.Resource, name resource.Name) (*T, error) {
	r := rs[string(name)].GetResource()
	if r == nil {
		return nil, nil
	}
	out := PT(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.AsMap(), out); err != nil {
		return nil, fmt.Errorf("cannot decode observed composed resource %q: %w", name, err)
	}
	return out, nil
}
