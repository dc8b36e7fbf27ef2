package wire

import (
	"fmt"
	"regexp"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/runtime"
)

// A Projection says which fields of an observed object Decode reads:
// Fields, only those it names, or Omit, all but those it names.
type Projection interface {
	apply(s *structpb.Struct) map[string]any
}

// Fields is a projection: the parts of an observed object a caller reads. A
// nil subtree takes the whole value; a projection applied to a list applies
// to each element. Decoding only these is most of the speed of a request
// with full observed state (a StatefulSet is hundreds of fields). A field
// left out reads as unset: project only objects too big to decode whole.
type Fields map[string]Fields

func (f Fields) apply(s *structpb.Struct) map[string]any { return project(s, f) }

// Omit is the opposite projection: every field but those it names (a nil
// subtree leaves the field out, a non-nil one recurses into it), and never
// metadata.managedFields: the API server's record of who applied what,
// which no rule reads and which in a cluster is often as large as the spec.
type Omit map[string]Omit

func (o Omit) apply(s *structpb.Struct) map[string]any {
	m := omit(s, o)
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	return m
}

// Whole omits nothing but metadata.managedFields.
var Whole Omit

// Decode decodes s, projected by p, into out, a pointer to a typed
// Kubernetes object.
func Decode(s *structpb.Struct, p Projection, out any) error {
	m := p.apply(s)
	if err := guardQuantities(m); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, out)
}

// omit copies s but the fields o names into plain Go values.
func omit(s *structpb.Struct, o Omit) map[string]any {
	out := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		sub, named := o[k]
		switch {
		case !named:
			out[k] = v.AsInterface()
		case sub != nil:
			out[k] = omitValue(v, sub)
		}
	}
	return out
}

// omitValue applies o to a struct, or to each element of a list.
func omitValue(v *structpb.Value, o Omit) any {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return omit(k.StructValue, o)
	case *structpb.Value_ListValue:
		l := make([]any, 0, len(k.ListValue.GetValues()))
		for _, e := range k.ListValue.GetValues() {
			l = append(l, omitValue(e, o))
		}
		return l
	}
	return v.AsInterface()
}

// project copies the projected parts of s into plain Go values.
func project(s *structpb.Struct, f Fields) map[string]any {
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

func projectValue(v *structpb.Value, f Fields) any {
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

// hugeExponent is what makes resource.ParseQuantity take minutes to reject
// a string ("1e-999999999", found by fuzzing): no volume or CPU needs 3
// exponent digits.
var hugeExponent = regexp.MustCompile(`[eE][-+]?[0-9]{3,}`)

// UnsafeQuantity reports whether s is a string resource.ParseQuantity could
// spend minutes on: too long, or with an exponent of 3 digits or more. A
// real API server only stores canonical quantities.
func UnsafeQuantity(s string) bool {
	return len(s) > 64 || hugeExponent.MatchString(s)
}

// guardQuantities rejects resource quantities (values of requests and
// limits) that are UnsafeQuantity, e.g. "1e-999999999" in a hand-written
// observed file.
func guardQuantities(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "requests" || k == "limits" {
				if q, ok := e.(map[string]any); ok {
					for n, s := range q {
						if str, ok := s.(string); ok && UnsafeQuantity(str) {
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
