package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/example/function-database/internal/wire/wiretest"
)

// TestMarshalStructCases pins the JSON rules the encoder follows on small
// types, the length encodings (1, 2 and 3 byte lengths), and its errors.
func TestMarshalStructCases(t *testing.T) {
	type inner struct {
		A string `json:"a,omitempty"`
	}
	type Embedded struct {
		Name  string `json:"name"`
		Depth string `json:"depth"`
	}
	type withInline struct {
		*Embedded `json:",inline"`

		Depth string `json:"depth"`
	}
	type withValue struct {
		Embedded `json:",inline"`
	}
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := map[string]struct {
		obj     any
		want    string // the Struct as JSON
		wantErr string
	}{
		"PointerToEmptyStructKept": {obj: &struct {
			E *inner `json:"e"`
		}{E: &inner{}}, want: `{"e":{}}`},
		"ZeroStructDropped": {obj: struct {
			E inner `json:"e"`
		}{}, want: `{}`},
		"NilsDropped": {obj: struct {
			P *string         `json:"p"`
			S []string        `json:"s"`
			M map[string]bool `json:"m"`
			B []byte          `json:"b"`
		}{}, want: `{}`},
		"EmptyButNotNilKept": {obj: struct {
			S []string        `json:"s"`
			M map[string]bool `json:"m"`
		}{S: []string{}, M: map[string]bool{}}, want: `{"m":{},"s":[]}`},
		"NoiseInListIsNull": {obj: struct {
			L []*inner `json:"l"`
		}{L: []*inner{nil, {A: "x"}}}, want: `{"l":[null,{"a":"x"}]}`},
		"OmitEmptyFalseDropped_PlainFalseKept": {obj: struct {
			A bool `json:"a,omitempty"`
			B bool `json:"b"`
		}{}, want: `{"b":false}`},
		"NumbersAndBytes": {obj: struct {
			I int64   `json:"i"`
			U uint8   `json:"u"`
			F float64 `json:"f"`
			B []byte  `json:"b"`
		}{I: -3, U: 7, F: 0.5, B: []byte("hi")}, want: `{"b":"aGk=","f":0.5,"i":-3,"u":7}`},
		"MapKeysSorted": {obj: struct {
			M map[string]int    `json:"m"`
			S map[string]string `json:"s"`
		}{M: map[string]int{"b": 2, "a": 1, "c": 3}, S: map[string]string{"z": "1", "": "0"}}, want: `{"m":{"a":1,"b":2,"c":3},"s":{"":"0","z":"1"}}`},
		"ShallowestFieldWins":     {obj: withInline{Embedded: &Embedded{Name: "n", Depth: "deep"}, Depth: "shallow"}, want: `{"depth":"shallow","name":"n"}`},
		"NilInlinePointerSkipped": {obj: withInline{Depth: "d"}, want: `{"depth":"d"}`},
		"InlineValue":             {obj: withValue{Embedded{Name: "n"}}, want: `{"depth":"","name":"n"}`},
		"TopLevelStatusDropped": {obj: struct {
			Status string `json:"status"`
			Spec   struct {
				Status string `json:"status"`
			} `json:"spec"`
		}{Status: "x", Spec: struct {
			Status string `json:"status"`
		}{Status: "y"}}, want: `{"spec":{"status":"y"}}`},
		"LengthsOfOneTwoAndThreeBytes": {obj: struct {
			A string   `json:"a"`
			B string   `json:"b"`
			C string   `json:"c"`
			L []string `json:"l"`
		}{A: long(100), B: long(200), C: long(20000), L: []string{long(127), long(128), long(16383), long(16384)}}},
		"InvalidUTF8": {obj: struct {
			S string `json:"s"`
		}{S: "\xff"}, wantErr: "s: \"\\xff\" is not valid UTF-8"},
		"InvalidUTF8Key": {obj: struct {
			M map[string]string `json:"m"`
		}{M: map[string]string{"\xfe": "x"}}, wantErr: "m: \"\\xfe\" is not valid UTF-8"},
		"NonStringKeys": {obj: struct {
			M map[int]string `json:"m"`
		}{M: map[int]string{1: "x"}}, wantErr: "m: cannot convert a map with int keys"},
		"StringMapLengths": {obj: struct {
			M map[string]string `json:"m"`
		}{M: map[string]string{"a": long(120), "b": long(123), "c": long(124), long(130): long(128), "d": long(16373), "e": long(16378), "f": long(16384), "g": long(2 << 20), "h": ""}}},
		"NotAStruct": {obj: "x", wantErr: "cannot convert string: not a struct"},
		"Channel": {obj: struct {
			C chan int `json:"c"`
		}{C: make(chan int)}, wantErr: "c: cannot convert a value of type chan int"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := MarshalStruct(tc.obj)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error: want %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := wiretest.DecodeCanonical(t, b)
			// Compare with encoding/json's form of the same object where
			// the case states none.
			want := tc.want
			if want == "" {
				j, _ := json.Marshal(tc.obj)
				want = string(j)
			}
			var w, g any
			got, _ := s.MarshalJSON()
			_ = json.Unmarshal([]byte(want), &w)
			_ = json.Unmarshal(got, &g)
			if d := cmp.Diff(w, g); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// immortalScript is a package-level string, as the embedded scripts are:
// it lives as long as the process, so it may be registered.
var immortalScript = strings.Repeat("#!/usr/bin/env bash\necho 'a line of a script, é'\n", 2000)

// TestImmortal: a registered string encodes exactly as before; one that is
// not valid UTF-8 is refused at registration, and its encoding still fails.
func TestImmortal(t *testing.T) {
	m := map[string]string{"script.sh": immortalScript}
	before, err := MarshalStruct(struct {
		Data map[string]string `json:"data"`
	}{m})
	if err != nil {
		t.Fatal(err)
	}
	if err := Immortal(immortalScript); err != nil {
		t.Fatal(err)
	}
	after, err := MarshalStruct(struct {
		Data map[string]string `json:"data"`
	}{m})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("the encoding changed once registered (-before +after):\n%s", d)
	}
	bad := strings.Repeat("x", 2000) + "\xff"
	if err := Immortal(bad); err == nil {
		t.Error("an invalid string was registered")
	}
	if _, err := MarshalStruct(struct {
		Data map[string]string `json:"data"`
	}{map[string]string{"k": bad}}); err == nil {
		t.Error("an invalid string was encoded")
	}
}

// BenchmarkImmortal: a ConfigMap-like map with one 100 KB script, encoded
// with the string registered (Immortal) and not; compare the two in one run.
func BenchmarkImmortal(b *testing.B) {
	s := strings.Repeat("#!/usr/bin/env bash\necho 'another line, à'\n", 2500) // not registered
	if err := Immortal(immortalScript); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    string
	}{{"checked", s}, {"immortal", immortalScript}} {
		b.Run(tc.name, func(b *testing.B) {
			v := struct {
				Data map[string]string `json:"data"`
			}{map[string]string{"script.sh": tc.s}}
			b.SetBytes(int64(len(tc.s)))
			for b.Loop() {
				if _, err := MarshalStruct(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// appendStringMapMoving is appendStringMap as it was before every length was
// computed first: each entry's value and the entry moved right by
// closeMessage once written, the map once more. Kept as the baseline of
// BenchmarkStringMap and as the reference of TestStringMapSameBytes.
func appendStringMapMoving(b []byte, m map[string]string) ([]byte, error) {
	b, at := openMessage(b, tagStruct)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var entry, val int
		var err error
		if b, entry, val, err = openEntry(b, k); err != nil {
			return nil, err
		}
		if b, err = appendString(b, tagString, m[k]); err != nil {
			return nil, err
		}
		b = closeMessage(closeMessage(b, val), entry)
	}
	return closeMessage(b, at), nil
}

// appendStringMapEntryMoving is the entry "data": m as it was appended before
// (appendEntry's placeholders, moved once the map was written).
func appendStringMapEntryMoving(b []byte, m map[string]string) ([]byte, error) {
	b, entry, val, err := openEntry(b, "data")
	if err != nil {
		return nil, err
	}
	if b, err = appendStringMapMoving(b, m); err != nil {
		return nil, err
	}
	return closeMessage(closeMessage(b, val), entry), nil
}

func appendStringMapEntryData(b []byte, m map[string]string) ([]byte, error) {
	return appendStringMapEntry(b, "data", m)
}

// scriptsLike is a map shaped like the scripts ConfigMap's data: a dozen
// scripts of 1-20 KB and a few short keys.
func scriptsLike() map[string]string {
	m := map[string]string{"primary": "0", "switchover-on-stop": "true"}
	for i, n := range []int{20000, 15000, 12000, 9000, 8000, 7000, 6000, 5000, 4000, 2000, 1000, 130} {
		m[fmt.Sprintf("script-%02d.sh", i)] = strings.Repeat("x", n)
	}
	return m
}

func TestStringMapSameBytes(t *testing.T) {
	cases := map[string]map[string]string{
		"Empty":       {},
		"Short":       {"a": "1", "b": ""},
		"ScriptsLike": scriptsLike(),
	}
	for name, m := range cases {
		for _, pair := range []struct {
			what        string
			moving, got func([]byte, map[string]string) ([]byte, error)
		}{{"map", appendStringMapMoving, appendStringMap}, {"entry", appendStringMapEntryMoving, appendStringMapEntryData}} {
			want, err := pair.moving([]byte{0xff}, m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pair.got([]byte{0xff}, m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("%s, %s: %d bytes, want the %d bytes of the moving encoder", name, pair.what, len(got), len(want))
			}
		}
	}
}

// BenchmarkStringMap: the scripts-like map encoded with every length
// computed first against the moving baseline; compare the two in one run.
func BenchmarkStringMap(b *testing.B) {
	m := scriptsLike()
	for _, tc := range []struct {
		name string
		f    func([]byte, map[string]string) ([]byte, error)
	}{{"moving", appendStringMapMoving}, {"sized", appendStringMap}, {"entry-moving", appendStringMapEntryMoving}, {"entry-sized", appendStringMapEntryData}} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 128<<10)
			for b.Loop() {
				if _, err := tc.f(buf[:0], m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStructMessageInPlace: a resource's tag and length written in the room
// before its fields are the bytes closeMessage would have moved the fields
// for, for lengths of one to four bytes.
func TestStructMessageInPlace(t *testing.T) {
	for _, n := range []int{0, 100, 124, 125, 200, 16370, 16400, 2<<20 - 20, 2<<20 + 10} {
		obj := struct {
			S string `json:"s,omitempty"`
		}{strings.Repeat("x", n)}
		v, err := structOf(obj)
		if err != nil {
			t.Fatal(err)
		}
		want, at := openMessage(nil, tagResource)
		if want, err = appendFields(want, v, true); err != nil {
			t.Fatal(err)
		}
		want = closeMessage(want, at)
		got, err := structMessage(make([]byte, 0, 16), tagResource, obj)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("a string of %d bytes: %d bytes, want the %d bytes closeMessage gives", n, len(got), len(want))
		}
	}
}
