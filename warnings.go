package main

import (
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// newlyBlocked returns the blocked changes the observed XR does not report
// yet. A Warning result becomes an event on the XR and its claim, and
// Crossplane's function specification asks functions not to emit one on
// every call; the SpecApplied condition (specApplied) is the durable signal
// of a blocked change. So a blocked change is warned about once: when it
// first appears, before the condition that reports it is on the XR. A
// blocked change whose message differs (the user asks for another size) is
// a new one, and warned about again.
func newlyBlocked(xr *structpb.Struct, bs []blocked) []blocked {
	c := observedCondition(xr, condSpecApplied)
	if c == nil || c.Status != metav1.ConditionFalse {
		return bs
	}
	var out []blocked
	for _, b := range bs {
		// The condition's message joins every blocked change's message:
		// each is specific (it names the values), so containment is being
		// reported.
		if !strings.Contains(c.Message, b.Message) {
			out = append(out, b)
		}
	}
	return out
}

// warning is a Warning result that is no blocked spec change: something
// read back that the function ignored or refused (failover.go). The
// condition of its concern says it too, which newlyWarned relies on.
type warning struct {
	Reason, Message string
}

// newlyWarned returns the warnings the observed XR's condition of type
// typ (Failover, Restored) does not say yet, as newlyBlocked does for
// SpecApplied: a Warning once, when it first appears, not on every call.
func newlyWarned(xr *structpb.Struct, typ string, ws []warning) []warning {
	c := observedCondition(xr, typ)
	var out []warning
	for _, w := range ws {
		if c == nil || !strings.Contains(c.Message, w.Message) {
			out = append(out, w)
		}
	}
	return out
}

// observedCondition is the condition of type typ in the observed XR's
// status, or nil. Crossplane writes a function's conditions there with the
// fields of a metav1.Condition.
func observedCondition(xr *structpb.Struct, typ string) *metav1.Condition {
	for _, v := range structAt(xr, "status").GetFields()["conditions"].GetListValue().GetValues() {
		s := v.GetStructValue()
		if s.GetFields()["type"].GetStringValue() != typ {
			continue
		}
		c := &metav1.Condition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(s.AsMap(), c); err != nil {
			// Unreadable: as if absent, so the Warning is not lost.
			return nil
		}
		return c
	}
	return nil
}
