package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/crossplane/function-sdk-go/errors"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/example/function-database/internal/wire"
)

// Function composes a PostgreSQL stack from a Database.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log     logging.Logger
	configs configCache
	// password generates a new password; crypto/rand outside tests.
	password func() string
}

// NewFunction returns the Function, logging to log.
func NewFunction(log logging.Logger) *Function {
	return &Function{log: log, password: newPassword}
}

// RunFunction composes the desired state of one Database. A bad request is
// answered with a Fatal result, never a Go error, and a panic in a builder
// becomes a Fatal result for that request instead of a dead server.
func (f *Function) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (rsp *fnv1.RunFunctionResponse, _ error) {
	rsp = response.To(req, response.DefaultTTL)
	defer func() {
		if r := recover(); r != nil {
			f.log.Info("Recovered from a panic composing a Database", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			rsp = response.To(req, response.DefaultTTL)
			response.Fatal(rsp, errors.Errorf("internal error composing the Database (please report it): %v", r))
		}
	}()

	xr := req.GetObserved().GetComposite().GetResource()
	if xr == nil {
		response.Fatal(rsp, errors.New("the request has no observed composite resource (the Database)"))
		return rsp, nil
	}
	log := f.log.WithValues("xr-name", stringAt(xr, "metadata", "name"), "xr-namespace", stringAt(xr, "metadata", "namespace"))

	cfg, errs := f.configs.get(req.GetInput())
	if len(errs) > 0 {
		response.Fatal(rsp, invalid("function input", errs))
		return rsp, nil
	}
	db, errs := parseDatabase(xr, cfg)
	if len(errs) > 0 {
		response.Fatal(rsp, invalid("Database", errs))
		return rsp, nil
	}
	o, err := readRequest(req, db)
	if err != nil {
		response.Fatal(rsp, errors.Wrap(err, "cannot read the observed composed resources"))
		return rsp, nil
	}
	if err := forbiddenRestore(db, o); err != nil {
		response.Fatal(rsp, err)
		return rsp, nil
	}

	p := makePlan(db, o, f.password)
	desired := compose(db, p)
	// Readiness once, by the rules of ready.go: each resource's, the
	// StatefulSet's (the phase) and all of them (the Ready condition).
	rd := readinessOf(desired, o, p.Replicas)
	if err := setDesired(rsp, desired, rd); err != nil {
		response.Fatal(rsp, errors.Wrap(err, "cannot set the desired composed resources"))
		return rsp, nil
	}

	if err := setStatus(rsp, xr, status(db, p, o, rd[rnStatefulSet] == fnv1.Ready_READY_TRUE, rd.all())); err != nil {
		response.Fatal(rsp, errors.Wrap(err, "cannot set the Database's status"))
		return rsp, nil
	}
	if db.Legacy {
		setConnectionDetails(rsp, desired)
	}
	// Crossplane fetches what the function requires and calls again within
	// the same reconcile, until the requirements stop changing.
	if req := requirements(p); len(req) > 0 {
		rsp.Requirements = &fnv1.Requirements{Resources: req}
	}
	for _, c := range conditions(db, p, o) {
		opt := newCondition(rsp, c)
		opt.TargetCompositeAndClaim()
	}
	// A Warning only when a blocked change first appears; the SpecApplied
	// condition is the durable signal (newlyBlocked).
	for _, b := range newlyBlocked(xr, p.Blocked) {
		response.Warning(rsp, errors.New(b.Message)).WithReason(b.Reason).TargetCompositeAndClaim()
	}
	var ws []warning
	if p.Failover != nil {
		ws = newlyWarned(xr, condFailover, p.Failover.Warnings)
	}
	if p.Restore != nil {
		ws = append(ws, newlyWarned(xr, condRestored, p.Restore.Warnings)...)
	}
	for _, w := range ws {
		response.Warning(rsp, errors.New(w.Message)).WithReason(w.Reason).TargetCompositeAndClaim()
	}
	log.Debug("Composed a Database", "resources", len(desired), "blocked", len(p.Blocked))
	return rsp, nil
}

// invalid turns validation errors into one error naming every field.
func invalid(what string, errs field.ErrorList) error {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return errors.Errorf("invalid %s: %s", what, strings.Join(msgs, "; "))
}

func newCondition(rsp *fnv1.RunFunctionResponse, c condition) *response.ConditionOption {
	var opt *response.ConditionOption
	switch c.Status {
	case fnv1.Status_STATUS_CONDITION_TRUE:
		opt = response.ConditionTrue(rsp, c.Type, c.Reason)
	case fnv1.Status_STATUS_CONDITION_FALSE:
		opt = response.ConditionFalse(rsp, c.Type, c.Reason)
	default:
		opt = response.ConditionUnknown(rsp, c.Type, c.Reason)
	}
	return opt.WithMessage(c.Message)
}

// setDesired adds the composed resources to the desired state the previous
// pipeline steps left, each with the function's own readiness.
func setDesired(rsp *fnv1.RunFunctionResponse, desired map[resource.Name]any, rd readinessMap) error {
	if rsp.Desired == nil {
		rsp.Desired = &fnv1.State{}
	}
	if rsp.Desired.Resources == nil {
		rsp.Desired.Resources = make(map[string]*fnv1.Resource, len(desired))
	}
	for name, obj := range desired {
		r, err := wire.Resource(string(name), obj, rd[name])
		if err != nil {
			return errors.Wrapf(err, "cannot convert %q", name)
		}
		rsp.Desired.Resources[string(name)] = r
	}
	return nil
}

// setStatus merges the Database's status into the desired XR, keeping what
// earlier steps set.
func setStatus(rsp *fnv1.RunFunctionResponse, observedXR *structpb.Struct, s dbStatus) error {
	st, err := wire.Struct(&s)
	if err != nil {
		return err
	}
	if rsp.Desired.Composite == nil {
		rsp.Desired.Composite = &fnv1.Resource{}
	}
	xr := rsp.Desired.Composite.Resource
	if xr == nil {
		xr = &structpb.Struct{Fields: map[string]*structpb.Value{
			"apiVersion": observedXR.GetFields()["apiVersion"],
			"kind":       observedXR.GetFields()["kind"],
		}}
		rsp.Desired.Composite.Resource = xr
	}
	cur := xr.GetFields()["status"].GetStructValue()
	if cur == nil {
		cur = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		xr.Fields["status"] = structpb.NewStructValue(cur)
	}
	for k, v := range st.GetFields() {
		cur.Fields[k] = v
	}
	return nil
}

// requirements are the resources the function asks Crossplane for, each
// only on a reconcile whose observed state cannot settle it (every one
// costs a second call): the restore's source, the platform's object storage
// Secret, the drill's pods, the instance pods and the failover Job's pods.
func requirements(p *plan) map[string]*fnv1.ResourceSelector {
	var out map[string]*fnv1.ResourceSelector
	if p.Restore != nil && p.Restore.Require != nil {
		out = map[string]*fnv1.ResourceSelector{requirementRestoreSource: p.Restore.Require}
	}
	if p.Restore != nil && p.Restore.RequireInstances != nil {
		if out == nil {
			out = make(map[string]*fnv1.ResourceSelector, 1)
		}
		out[requirementInstances] = p.Restore.RequireInstances
	}
	if p.Archive != nil && p.Archive.Require != nil {
		if out == nil {
			out = make(map[string]*fnv1.ResourceSelector, 1)
		}
		out[requirementObjectStorage] = p.Archive.Require
	}
	if p.Drill != nil && p.Drill.Require != nil {
		if out == nil {
			out = make(map[string]*fnv1.ResourceSelector, 1)
		}
		out[requirementDrillPods] = p.Drill.Require
	}
	if p.Failover != nil {
		for k, v := range p.Failover.Require {
			if out == nil {
				out = make(map[string]*fnv1.ResourceSelector, len(p.Failover.Require))
			}
			out[k] = v
		}
	}
	return out
}
