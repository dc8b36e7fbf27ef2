package wire

import (
	"encoding/json"
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
