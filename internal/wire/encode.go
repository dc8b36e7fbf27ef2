package wire

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// The composed resources go into the response as google.protobuf.Struct. The
// encoder here walks a typed Kubernetes object once, by reflection, and
// appends that Struct's protobuf wire form straight to a byte slice: no JSON
// round trip, no unstructured map, no tree of structpb.Value objects that
// would only be built to be marshaled and thrown away (that tree and its
// deterministic marshal were a third of the function's CPU per request).
//
// The output is the canonical deterministic encoding: the bytes
// proto.MarshalOptions{Deterministic: true} gives for the same Struct (keys
// sorted), which encode_test.go checks on small types and the root
// package's compose_test.go for every composed kind.
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

// Wire tags (field number << 3 | wire type) of google.protobuf.Struct,
// Value, ListValue and of the fields' map entries, and of Resource.resource.
const (
	tagStructFields = byte(1<<3) | byte(protowire.BytesType)   // Struct.fields: repeated map entry
	tagEntryKey     = byte(1<<3) | byte(protowire.BytesType)   // map entry key
	tagEntryValue   = byte(2<<3) | byte(protowire.BytesType)   // map entry value (a Value)
	tagNull         = byte(1<<3) | byte(protowire.VarintType)  // Value.null_value
	tagNumber       = byte(2<<3) | byte(protowire.Fixed64Type) // Value.number_value (fixed64)
	tagString       = byte(3<<3) | byte(protowire.BytesType)   // Value.string_value
	tagBool         = byte(4<<3) | byte(protowire.VarintType)  // Value.bool_value
	tagStruct       = byte(5<<3) | byte(protowire.BytesType)   // Value.struct_value
	tagList         = byte(6<<3) | byte(protowire.BytesType)   // Value.list_value
	tagListValues   = byte(1<<3) | byte(protowire.BytesType)   // ListValue.values
	tagResource     = byte(1<<3) | byte(protowire.BytesType)   // fnv1.Resource.resource
)

// Resource returns the Resource for obj, composed as name, with the given
// readiness. Its resource field travels as pre-encoded bytes (the message's
// unknown field 1, which protobuf marshals verbatim), so on the wire it is
// exactly a Resource whose resource is obj's Struct. Inside this process
// GetResource() is nil: whoever needs the Struct decodes the marshaled
// response, as Crossplane does, or reads it with Readable.
func Resource(name string, obj any, ready fnv1.Ready) (*fnv1.Resource, error) {
	hint := sizeHint(name)
	b, err := structMessage(make([]byte, 0, hint.Load()), tagResource, obj)
	if err != nil {
		return nil, err
	}
	hint.Store(int64(len(b) + len(b)/16))
	r := &fnv1.Resource{Ready: ready}
	r.ProtoReflect().SetUnknown(b)
	return r, nil
}

var sizeHints sync.Map // composed resource name -> *atomic.Int64

// sizeHint is the buffer size to start encoding the resource composed as
// name with: the last one's size and some room, so that the buffer is
// allocated once, not grown by doubling. The names are the function's own
// fixed set, so this stays small.
func sizeHint(name string) *atomic.Int64 {
	if h, ok := sizeHints.Load(name); ok {
		return h.(*atomic.Int64) //nolint:forcetypeassert // only *atomic.Int64 is stored
	}
	h := &atomic.Int64{}
	h.Store(1024)
	actual, _ := sizeHints.LoadOrStore(name, h)
	return actual.(*atomic.Int64) //nolint:forcetypeassert // only *atomic.Int64 is stored
}

// Struct converts a typed Kubernetes object into a protobuf Struct, by the
// same rules as Resource (for the few places that merge into a Struct, such
// as the XR's status).
func Struct(obj any) (*structpb.Struct, error) {
	b, err := MarshalStruct(obj)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		return nil, err
	}
	return s, nil
}

// MarshalStruct returns the wire form of obj's Struct: the bytes
// proto.MarshalOptions{Deterministic: true} gives for Struct(obj).
func MarshalStruct(obj any) ([]byte, error) {
	v, err := structOf(obj)
	if err != nil {
		return nil, err
	}
	return appendFields(nil, v, true)
}

// structMessage encodes obj's Struct as the message field tag into buf
// (empty): the fields first, after room for the tag and the longest length,
// then the tag and the length right before them, so that nothing is moved
// (closeMessage would move the whole resource once more: the scripts
// ConfigMap's 95 KB). The result starts where the tag does; the room left
// before it is a few bytes of buf never read.
func structMessage(buf []byte, tag byte, obj any) ([]byte, error) {
	const room = 1 + 4 // the tag; a length below 2^28 (gRPC's limit is far below)
	v, err := structOf(obj)
	if err != nil {
		return nil, err
	}
	b, err := appendFields(append(buf[:0], make([]byte, room)...), v, true)
	if err != nil {
		return nil, err
	}
	n := uint64(len(b) - room)
	size := protowire.SizeVarint(n)
	if size > room-1 {
		return nil, fmt.Errorf("cannot encode %T: %d bytes", obj, n)
	}
	at := room - 1 - size
	b[at] = tag
	protowire.AppendVarint(b[at+1:at+1], n) // in place: the size bytes before the fields
	return b[at:], nil
}

func structOf(obj any) (reflect.Value, error) {
	v := reflect.ValueOf(obj)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, fmt.Errorf("cannot convert %T: not a struct", obj)
	}
	return v, nil
}

// openMessage appends a length-delimited field's tag and a one-byte length
// placeholder, and returns where the placeholder is.
func openMessage(b []byte, tag byte) ([]byte, int) {
	b = append(b, tag, 0)
	return b, len(b) - 1
}

// closeMessage writes the length of what follows the placeholder at at. Most
// messages (a scalar Value, a short map entry) fit the one byte; a longer one
// is moved right by the extra bytes its varint length needs.
func closeMessage(b []byte, at int) []byte {
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	extra := protowire.SizeVarint(uint64(n)) - 1
	b = slices.Grow(b, extra)[:len(b)+extra]
	copy(b[at+1+extra:], b[at+1:at+1+n])
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

// immortal holds strings registered with Immortal: the same string headers
// every request (the scripts), checked for UTF-8 once.
var immortal sync.Map // immortalKey → struct{}

type immortalKey struct {
	p *byte
	n int
}

// Immortal declares strings that live as long as the process (package-level
// values, e.g. embedded files) and are encoded on every request: they are
// checked for valid UTF-8 once, here, instead of on every encoding (the
// scripts ConfigMap's 90 KB was 4% of a steady reconcile). Keyed by the
// strings' data pointers, so only strings that are never freed may be
// registered: a freed string's address could hold another, unchecked one.
func Immortal(ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%.40q... is not valid UTF-8", s)
		}
		if s != "" {
			immortal.Store(immortalKey{unsafe.StringData(s), len(s)}, struct{}{}) //nolint:gosec // G103: only the address is kept, as a key, never dereferenced
		}
	}
	return nil
}

// validUTF8 is utf8.ValidString, answered at once for an Immortal string.
func validUTF8(s string) bool {
	if len(s) >= 1024 {
		if _, ok := immortal.Load(immortalKey{unsafe.StringData(s), len(s)}); ok { //nolint:gosec // G103: the address compared, never dereferenced
			return true
		}
	}
	return utf8.ValidString(s)
}

func appendString(b []byte, tag byte, s string) ([]byte, error) {
	if !validUTF8(s) {
		return nil, fmt.Errorf("%q is not valid UTF-8", s)
	}
	b = append(b, tag)
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...), nil
}

func appendNumber(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, tagNumber), math.Float64bits(f))
}

func appendBool(b []byte, x bool) []byte {
	if x {
		return append(b, tagBool, 1)
	}
	return append(b, tagBool, 0)
}

// appendFields appends the Struct fields of struct v (top: without status).
func appendFields(b []byte, v reflect.Value, top bool) ([]byte, error) {
	for _, fi := range JSONFields(v.Type()) {
		if top && fi.Name == "status" {
			continue
		}
		f, ok := fieldByPath(v, fi.Index)
		if !ok || (fi.omitEmpty && isEmpty(f)) || (fi.omitZero && f.IsZero()) {
			continue
		}
		var err error
		if b, err = appendEntry(b, fi.Name, f); err != nil {
			return nil, fmt.Errorf("%s: %w", fi.Name, err)
		}
	}
	return b, nil
}

// appendEntry appends the map entry key: v, or nothing when v is noise.
func appendEntry(b []byte, key string, v reflect.Value) ([]byte, error) {
	if v.Type() == typeStringMap && !v.IsNil() {
		return appendStringMapEntry(b, key, v.Interface().(map[string]string)) //nolint:forcetypeassert // checked by type
	}
	start := len(b)
	b, entry, val, err := openEntry(b, key)
	if err != nil {
		return nil, err
	}
	b, keep, err := appendValue(b, v)
	if err != nil {
		return nil, err
	}
	if !keep {
		return b[:start], nil
	}
	return closeMessage(closeMessage(b, val), entry), nil
}

// openEntry opens a Struct map entry and its value, after the key.
func openEntry(b []byte, key string) (_ []byte, entry, val int, _ error) {
	b, entry = openMessage(b, tagStructFields)
	b, err := appendString(b, tagEntryKey, key)
	if err != nil {
		return nil, 0, 0, err
	}
	b, val = openMessage(b, tagEntryValue)
	return b, entry, val, nil
}

// appendStringMap is appendMap for the most common map, labels and data:
// no reflection per entry, and no byte moved: every length is known before
// it is written, where closeMessage would move each entry twice and the
// whole map once more (the scripts ConfigMap's 90 KB: memmove was 9% of a
// steady reconcile).
func appendStringMap(b []byte, m map[string]string) ([]byte, error) {
	keys, size, err := stringMapSize(m)
	if err != nil {
		return nil, err
	}
	return appendSizedStringMap(b, keys, m, size), nil
}

// appendStringMapEntry is appendEntry for a string map: the entry's and its
// value's lengths are known too, so the map is not moved by the entry that
// holds it either.
func appendStringMapEntry(b []byte, key string, m map[string]string) ([]byte, error) {
	if !validUTF8(key) {
		return nil, fmt.Errorf("%q is not valid UTF-8", key)
	}
	keys, size, err := stringMapSize(m)
	if err != nil {
		return nil, err
	}
	value := fieldSize(size) // the Value: struct_value
	b = slices.Grow(b, fieldSize(fieldSize(len(key))+fieldSize(value)))
	b = append(b, tagStructFields)
	b = protowire.AppendVarint(b, uint64(fieldSize(len(key))+fieldSize(value)))
	b = append(b, tagEntryKey)
	b = protowire.AppendVarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, tagEntryValue)
	b = protowire.AppendVarint(b, uint64(value))
	return appendSizedStringMap(b, keys, m, size), nil
}

// stringMapSize checks m's keys and values and returns the keys sorted and
// the size of the Struct's fields.
func stringMapSize(m map[string]string) ([]string, int, error) {
	keys := slices.Sorted(maps.Keys(m))
	size := 0
	for _, k := range keys {
		if !validUTF8(k) {
			return nil, 0, fmt.Errorf("%q is not valid UTF-8", k)
		}
		v := m[k]
		if !validUTF8(v) {
			return nil, 0, fmt.Errorf("%s: %q is not valid UTF-8", k, v)
		}
		size += fieldSize(entrySize(k, v))
	}
	return keys, size, nil
}

// appendSizedStringMap appends m as Value.struct_value, its fields size
// long and its keys sorted (stringMapSize).
func appendSizedStringMap(b []byte, keys []string, m map[string]string, size int) []byte {
	b = slices.Grow(b, fieldSize(size))
	b = append(b, tagStruct)
	b = protowire.AppendVarint(b, uint64(size))
	for _, k := range keys {
		v := m[k]
		b = append(b, tagStructFields)
		b = protowire.AppendVarint(b, uint64(entrySize(k, v)))
		b = append(b, tagEntryKey)
		b = protowire.AppendVarint(b, uint64(len(k)))
		b = append(b, k...)
		b = append(b, tagEntryValue)
		b = protowire.AppendVarint(b, uint64(fieldSize(len(v))))
		b = append(b, tagString)
		b = protowire.AppendVarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// fieldSize is the size of a length-delimited field (one tag byte, the
// length, n bytes).
func fieldSize(n int) int {
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// entrySize is the size of a Struct's map entry of key k and string value v:
// the key field and the value field, a Value holding string_value.
func entrySize(k, v string) int {
	return fieldSize(len(k)) + fieldSize(fieldSize(len(v)))
}

var (
	typeTime      = reflect.TypeFor[metav1.Time]()
	typeQuantity  = reflect.TypeFor[resource.Quantity]()
	typeIntOrStr  = reflect.TypeFor[intstr.IntOrString]()
	typeBytes     = reflect.TypeFor[[]byte]()
	typeStringMap = reflect.TypeFor[map[string]string]()
	typeMarshal   = reflect.TypeFor[json.Marshaler]()
)

// appendValue appends the fields of v's Value, or returns keep=false for
// noise (and b unchanged).
func appendValue(b []byte, v reflect.Value) ([]byte, bool, error) {
	switch v.Type() {
	case typeTime:
		t := v.Interface().(metav1.Time) //nolint:forcetypeassert // checked by type
		if t.IsZero() {
			return b, false, nil
		}
		b, err := appendString(b, tagString, t.UTC().Format(time.RFC3339))
		return b, true, err
	case typeQuantity:
		q := v.Interface().(resource.Quantity) //nolint:forcetypeassert // checked by type
		b, err := appendString(b, tagString, q.String())
		return b, true, err
	case typeIntOrStr:
		is := v.Interface().(intstr.IntOrString) //nolint:forcetypeassert // checked by type
		if is.Type == intstr.String {
			b, err := appendString(b, tagString, is.StrVal)
			return b, true, err
		}
		return appendNumber(b, float64(is.IntVal)), true, nil
	case typeBytes:
		if v.IsNil() {
			return b, false, nil
		}
		b, err := appendString(b, tagString, base64.StdEncoding.EncodeToString(v.Bytes()))
		return b, true, err
	}

	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return b, false, nil
		}
		if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct && !hasSpecialEncoding(v.Elem().Type()) {
			// A pointer to a struct is kept even when empty: emptyDir: {}.
			return appendStructValue(b, v.Elem())
		}
		return appendValue(b, v.Elem())
	case reflect.Struct:
		if v.IsZero() {
			return b, false, nil
		}
		if marshalsJSON(v.Type()) {
			return appendJSON(b, v)
		}
		return appendStructValue(b, v)
	case reflect.Map:
		if v.IsNil() {
			return b, false, nil
		}
		if v.Type() == typeStringMap {
			b, err := appendStringMap(b, v.Interface().(map[string]string)) //nolint:forcetypeassert // checked by type
			return b, true, err
		}
		return appendMap(b, v)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return b, false, nil
		}
		return appendList(b, v)
	case reflect.String:
		b, err := appendString(b, tagString, v.String())
		return b, true, err
	case reflect.Bool:
		return appendBool(b, v.Bool()), true, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return appendNumber(b, float64(v.Int())), true, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return appendNumber(b, float64(v.Uint())), true, nil
	case reflect.Float32, reflect.Float64:
		return appendNumber(b, v.Float()), true, nil
	}
	return nil, false, fmt.Errorf("cannot convert a value of type %s", v.Type())
}

func appendStructValue(b []byte, v reflect.Value) ([]byte, bool, error) {
	b, at := openMessage(b, tagStruct)
	b, err := appendFields(b, v, false)
	if err != nil {
		return nil, false, err
	}
	return closeMessage(b, at), true, nil
}

// appendMap appends a string-keyed map as a Struct, keys sorted.
func appendMap(b []byte, v reflect.Value) ([]byte, bool, error) {
	if v.Type().Key().Kind() != reflect.String {
		return nil, false, fmt.Errorf("cannot convert a map with %s keys", v.Type().Key())
	}
	keys := v.MapKeys()
	slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(a.String(), b.String()) })
	b, at := openMessage(b, tagStruct)
	for _, k := range keys {
		var err error
		if b, err = appendEntry(b, k.String(), v.MapIndex(k)); err != nil {
			return nil, false, fmt.Errorf("%s: %w", k.String(), err)
		}
	}
	return closeMessage(b, at), true, nil
}

// appendList appends a ListValue; an element that is noise becomes null, as
// encoding/json would write it.
func appendList(b []byte, v reflect.Value) ([]byte, bool, error) {
	b, list := openMessage(b, tagList)
	for i := range v.Len() {
		var at int
		var keep bool
		var err error
		b, at = openMessage(b, tagListValues)
		if b, keep, err = appendValue(b, v.Index(i)); err != nil {
			return nil, false, fmt.Errorf("[%d]: %w", i, err)
		}
		if !keep {
			b = append(b, tagNull, 0)
		}
		b = closeMessage(b, at)
	}
	return closeMessage(b, list), true, nil
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

// appendJSON handles the rare type with its own JSON form that the converter
// does not know (none in the kinds composed today).
func appendJSON(b []byte, v reflect.Value) ([]byte, bool, error) {
	j, err := json.Marshal(v.Interface())
	if err != nil {
		return nil, false, err
	}
	val := &structpb.Value{}
	if err := val.UnmarshalJSON(j); err != nil {
		return nil, false, err
	}
	b, err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, val)
	return b, true, err
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
