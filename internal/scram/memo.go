package scram

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
)

// StableSalt is a salt that depends only on identity (which names one role
// of one database), never on the password: the same password then always
// gets the same verifier, so a composition function that computes it on
// every reconcile returns the same response byte for byte, and a verifier
// changes only when its password does. A salt derived from the password
// would let anyone holding the verifier test a guess with one cheap hash,
// which is what a salt with 4096 iterations of PBKDF2 is there to prevent;
// one that differs per role and per database still keeps one
// precomputation from serving two verifiers.
func StableSalt(identity string) []byte {
	sum := sha256.Sum256([]byte("function-database scram salt\x00" + identity))
	return sum[:SaltLen]
}

// Memo remembers verifiers already computed (each costs 4096 rounds of
// HMAC-SHA-256, about 0.7 ms), so that a process computing the same ones
// again and again (every reconcile of every database) pays for a password
// once. Safe for concurrent use. The zero value is ready.
type Memo struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]string
}

// memoLimit bounds a Memo: past it, the memo starts again empty (one
// reconcile per database then pays again). Three roles each of 5000
// databases fit.
const memoLimit = 1 << 14

// Verifier is Verifier(password, salt, iterations), computed once.
func (c *Memo) Verifier(password string, salt []byte, iterations int) string {
	// The key is a hash of everything the verifier depends on, lengths
	// included, so that two different inputs cannot share a key by moving
	// bytes between fields.
	h := sha256.New()
	for _, field := range [][]byte{salt, []byte(password), binary.BigEndian.AppendUint64(nil, uint64(iterations))} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(field))))
		h.Write(field)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])

	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return v
	}
	// Computed outside the lock: two reconciles of two databases do not
	// wait for each other; the same one computed twice at once is harmless.
	v = Verifier(password, salt, iterations)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= memoLimit {
		c.m = make(map[[sha256.Size]byte]string)
	}
	c.m[key] = v
	c.mu.Unlock()
	return v
}
