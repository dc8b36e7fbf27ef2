package wire

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// A Field is a struct field as encoding/json names and encodes it.
type Field struct {
	// Name is the field's JSON name.
	Name string
	// Index leads from the outer struct to the field, through inlined ones
	// (reflect.Type.FieldByIndex).
	Index     []int
	omitEmpty bool
	omitZero  bool
}

var fieldCache sync.Map // reflect.Type -> []Field

// JSONFields returns the JSON fields of struct type t sorted by name,
// inlined structs flattened (the shallowest field wins a name, as in
// encoding/json), so that a Struct's keys come out in the deterministic
// order without sorting per request. The result is cached per type and
// shared: do not modify it.
func JSONFields(t reflect.Type) []Field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]Field) //nolint:forcetypeassert // only []Field is stored
	}
	var fs []Field
	depth := map[string]int{}
	var walk func(t reflect.Type, path []int)
	walk = func(t reflect.Type, path []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() && !sf.Anonymous {
				continue
			}
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			p := append(slices.Clip(path), i)
			if (name == "" && sf.Anonymous) || strings.Contains(opts, "inline") {
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft, p)
				}
				continue
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if d, seen := depth[name]; seen && d <= len(p) {
				continue
			}
			fs = slices.DeleteFunc(fs, func(f Field) bool { return f.Name == name })
			depth[name] = len(p)
			fs = append(fs, Field{Index: p, Name: name, omitEmpty: strings.Contains(opts, "omitempty"), omitZero: strings.Contains(opts, "omitzero")})
		}
	}
	walk(t, nil)
	slices.SortFunc(fs, func(a, b Field) int { return cmp.Compare(a.Name, b.Name) })
	fieldCache.Store(t, fs)
	return fs
}

// fieldByPath follows path from v; ok is false when it crosses a nil pointer to an
// inlined struct.
func fieldByPath(v reflect.Value, path []int) (reflect.Value, bool) {
	for i, idx := range path {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(idx)
	}
	return v, true
}
