// Package wiretest holds what the tests of the wire encoder share, in
// internal/wire and in the root package (which encodes every composed kind
// through it). It imports testing: never import it from non-test code.
package wiretest

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// DecodeCanonical decodes a Struct's wire form, failing t unless the bytes
// are what protobuf's deterministic marshal gives for it.
func DecodeCanonical(t testing.TB, b []byte) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := proto.Unmarshal(b, s); err != nil {
		t.Fatal(err)
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, b) {
		t.Errorf("not the canonical encoding: %d bytes, canonical %d", len(b), len(want))
	}
	return s
}
