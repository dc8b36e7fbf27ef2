package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// toStruct converts a typed Kubernetes object into the protobuf Struct a
// RunFunctionResponse carries, in one reflective walk (no JSON round trip).
//
// It follows the JSON tags, and strips what the API server owns or what Go's
// zero values add, guided by the types rather than the values:
//   - the top-level status, and zero metav1.Time (creationTimestamp: null);
//   - nil pointers, slices and maps, even without omitempty (null);
//   - non-pointer structs that are entirely zero (resources: {},
//     updateStrategy: {}, template metadata: {}): Go cannot leave them out,
//     and the API server fills them.
//
// A pointer to an empty struct stays ({}), because it means something:
// emptyDir: {} is a volume. Scalars stay whenever omitempty does not drop
// them, so allowPrivilegeEscalation: false and automountServiceAccountToken:
// false are kept.
func toStruct(obj any) (*structpb.Struct, error) {
	v := reflect.ValueOf(obj)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("cannot convert %T: not a struct", obj)
	}
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if err := encodeFields(v, s.Fields); err != nil {
		return nil, err
	}
	delete(s.Fields, "status")
	return s, nil
}

// fieldInfo is a struct field's JSON encoding, cached per type.
type fieldInfo struct {
	index     int
	name      string
	omitEmpty bool
	omitZero  bool
	inline    bool
}

var fieldCache sync.Map // reflect.Type -> []fieldInfo

func fieldsOf(t reflect.Type) []fieldInfo {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]fieldInfo) //nolint:forcetypeassert // only []fieldInfo is stored
	}
	fs := make([]fieldInfo, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fi := fieldInfo{index: i, name: name, omitEmpty: strings.Contains(opts, "omitempty"), omitZero: strings.Contains(opts, "omitzero")}
		if name == "" {
			if !sf.Anonymous {
				fi.name = sf.Name
			} else {
				fi.inline = true
			}
		}
		if strings.Contains(opts, "inline") {
			fi.inline = true
		}
		fs = append(fs, fi)
	}
	fieldCache.Store(t, fs)
	return fs
}

func encodeFields(v reflect.Value, into map[string]*structpb.Value) error {
	for _, fi := range fieldsOf(v.Type()) {
		f := v.Field(fi.index)
		if fi.inline {
			for f.Kind() == reflect.Pointer {
				if f.IsNil() {
					break
				}
				f = f.Elem()
			}
			if f.Kind() == reflect.Struct {
				if err := encodeFields(f, into); err != nil {
					return err
				}
			}
			continue
		}
		if (fi.omitEmpty && isEmpty(f)) || (fi.omitZero && f.IsZero()) {
			continue
		}
		val, keep, err := encode(f)
		if err != nil {
			return fmt.Errorf("%s: %w", fi.name, err)
		}
		if keep {
			into[fi.name] = val
		}
	}
	return nil
}

var (
	typeTime     = reflect.TypeFor[metav1.Time]()
	typeQuantity = reflect.TypeFor[resource.Quantity]()
	typeIntOrStr = reflect.TypeFor[intstr.IntOrString]()
	typeBytes    = reflect.TypeFor[[]byte]()
	typeMarshal  = reflect.TypeFor[json.Marshaler]()
)

// encode returns the Struct value of v, or keep=false for noise.
func encode(v reflect.Value) (*structpb.Value, bool, error) {
	switch v.Type() {
	case typeTime:
		t := v.Interface().(metav1.Time) //nolint:forcetypeassert // checked by type
		if t.IsZero() {
			return nil, false, nil
		}
		return structpb.NewStringValue(t.UTC().Format(time.RFC3339)), true, nil
	case typeQuantity:
		q := v.Interface().(resource.Quantity) //nolint:forcetypeassert // checked by type
		return structpb.NewStringValue(q.String()), true, nil
	case typeIntOrStr:
		is := v.Interface().(intstr.IntOrString) //nolint:forcetypeassert // checked by type
		if is.Type == intstr.String {
			return structpb.NewStringValue(is.StrVal), true, nil
		}
		return structpb.NewNumberValue(float64(is.IntVal)), true, nil
	case typeBytes:
		if v.IsNil() {
			return nil, false, nil
		}
		return structpb.NewStringValue(base64.StdEncoding.EncodeToString(v.Bytes())), true, nil
	}

	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, false, nil
		}
		if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct && !hasSpecialEncoding(v.Elem().Type()) {
			// A pointer to a struct is kept even when empty: emptyDir: {}.
			s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
			if err := encodeFields(v.Elem(), s.Fields); err != nil {
				return nil, false, err
			}
			return structpb.NewStructValue(s), true, nil
		}
		return encode(v.Elem())
	case reflect.Struct:
		if v.IsZero() {
			return nil, false, nil
		}
		if marshalsJSON(v.Type()) {
			return encodeJSON(v)
		}
		s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		if err := encodeFields(v, s.Fields); err != nil {
			return nil, false, err
		}
		return structpb.NewStructValue(s), true, nil
	case reflect.Map:
		if v.IsNil() {
			return nil, false, nil
		}
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, v.Len())}
		it := v.MapRange()
		for it.Next() {
			val, keep, err := encode(it.Value())
			if err != nil {
				return nil, false, err
			}
			if keep {
				s.Fields[it.Key().String()] = val
			}
		}
		return structpb.NewStructValue(s), true, nil
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil, false, nil
		}
		l := &structpb.ListValue{Values: make([]*structpb.Value, 0, v.Len())}
		for i := range v.Len() {
			val, keep, err := encode(v.Index(i))
			if err != nil {
				return nil, false, err
			}
			if !keep {
				val = structpb.NewNullValue()
			}
			l.Values = append(l.Values, val)
		}
		return structpb.NewListValue(l), true, nil
	case reflect.String:
		return structpb.NewStringValue(v.String()), true, nil
	case reflect.Bool:
		return structpb.NewBoolValue(v.Bool()), true, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return structpb.NewNumberValue(float64(v.Int())), true, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return structpb.NewNumberValue(float64(v.Uint())), true, nil
	case reflect.Float32, reflect.Float64:
		return structpb.NewNumberValue(v.Float()), true, nil
	}
	return nil, false, fmt.Errorf("cannot convert a value of type %s", v.Type())
}

func hasSpecialEncoding(t reflect.Type) bool {
	switch t {
	case typeTime, typeQuantity, typeIntOrStr:
		return true
	}
	return marshalsJSON(t)
}

var marshalerCache sync.Map // reflect.Type -> bool

// marshalsJSON reports whether t has its own JSON form, cached per type:
// reflect's Implements is a costly method-set walk.
func marshalsJSON(t reflect.Type) bool {
	if m, ok := marshalerCache.Load(t); ok {
		return m.(bool) //nolint:forcetypeassert // only bools are stored
	}
	m := t.Implements(typeMarshal) || reflect.PointerTo(t).Implements(typeMarshal)
	marshalerCache.Store(t, m)
	return m
}

// encodeJSON handles the rare type with its own JSON form that toStruct does
// not know (none in the kinds composed today).
func encodeJSON(v reflect.Value) (*structpb.Value, bool, error) {
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return nil, false, err
	}
	out := &structpb.Value{}
	if err := out.UnmarshalJSON(b); err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}
