package scram

import (
	"bytes"
	"crypto/sha256"
	"sync"
	"testing"
)

func TestStableSalt(t *testing.T) {
	a, b := StableSalt("shop/orders/postgres"), StableSalt("shop/orders/replicator")
	if len(a) != SaltLen {
		t.Fatalf("salt of %d bytes, want %d", len(a), SaltLen)
	}
	if !bytes.Equal(a, StableSalt("shop/orders/postgres")) {
		t.Errorf("the same identity gave two salts")
	}
	if bytes.Equal(a, b) {
		t.Errorf("two roles share a salt")
	}
}

func TestMemo(t *testing.T) {
	var m Memo
	salt := StableSalt("shop/orders/app")
	for _, tc := range []struct {
		password   string
		salt       []byte
		iterations int
	}{
		{"one", salt, Iterations},
		{"two", salt, Iterations},
		{"one", StableSalt("shop/other/app"), Iterations},
		{"one", salt, 4095},
		// Bytes moved between salt and password are another input.
		{"x" + "one", salt[1:], Iterations},
	} {
		want := Verifier(tc.password, tc.salt, tc.iterations)
		for i := range 2 { // computed, then remembered
			if got := m.Verifier(tc.password, tc.salt, tc.iterations); got != want {
				t.Errorf("round %d: Memo.Verifier(%q, %x, %d) = %s, want %s", i, tc.password, tc.salt, tc.iterations, got, want)
			}
		}
	}
	if len(m.m) != 5 {
		t.Errorf("%d verifiers remembered, want 5", len(m.m))
	}

	// Full, it starts again rather than grow without bound.
	m.m = make(map[[sha256.Size]byte]string, memoLimit)
	for i := range memoLimit {
		m.m[sha256.Sum256([]byte{byte(i), byte(i >> 8)})] = "x"
	}
	if got, want := m.Verifier("one", salt, Iterations), Verifier("one", salt, Iterations); got != want {
		t.Errorf("after the reset: %s, want %s", got, want)
	}
	if len(m.m) != 1 {
		t.Errorf("%d verifiers remembered after the limit, want 1", len(m.m))
	}

	// Concurrent use (go test -race).
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Verifier(string(rune('a'+i%2)), salt, Iterations)
		}()
	}
	wg.Wait()
}

// BenchmarkMemoHit is what a reconcile pays per role once the verifier of
// its password is known (BenchmarkVerifier: the first time).
func BenchmarkMemoHit(b *testing.B) {
	var m Memo
	salt := StableSalt("shop/orders/app")
	m.Verifier("Zl3kqYq6yT1nB8vR2cW5xH0pJ4mD7sA9", salt, Iterations)
	for b.Loop() {
		m.Verifier("Zl3kqYq6yT1nB8vR2cW5xH0pJ4mD7sA9", salt, Iterations)
	}
}
