// Package scram computes the SCRAM-SHA-256 verifiers PostgreSQL stores for
// a role's password (RFC 5802 and RFC 7677, in PostgreSQL's text form
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>), so that a
// password can be set with ALTER ROLE ... PASSWORD '<verifier>' and the
// plaintext never reaches the server, where a logged statement would keep
// it.
//
// The password is prepared as PostgreSQL's pg_saslprep does, with its
// departures from RFC 4013 kept: an ASCII password is used as it is, and a
// password that SASLprep refuses (not UTF-8, empty after the mapping, a
// prohibited or unassigned character, or the bidirectional rules broken) is
// used as raw bytes, as the server and libpq both do. A verifier that
// differs from the one libpq computes for the same password would make
// every login fail, so the tests compare with the real server's.
package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xdg-go/stringprep"
	"golang.org/x/text/unicode/norm"
)

// Iterations is PostgreSQL's default scram_iterations (4096).
const Iterations = 4096

// SaltLen is the length of the salt PostgreSQL draws (16 bytes).
const SaltLen = 16

const prefix = "SCRAM-SHA-256$"

// Verifier is the verifier of password with salt and iterations.
func Verifier(password string, salt []byte, iterations int) string {
	stored, server := keys(password, salt, iterations)
	b64 := base64.StdEncoding.EncodeToString
	return prefix + strconv.Itoa(iterations) + ":" + b64(salt) + "$" + b64(stored) + ":" + b64(server)
}

// keys are the StoredKey and ServerKey of password.
func keys(password string, salt []byte, iterations int) (stored, server []byte) {
	// Hi() of RFC 5802 is PBKDF2 with HMAC-SHA-256, one block.
	salted, err := pbkdf2.Key(sha256.New, string(Prepare(password)), salt, iterations, sha256.Size)
	if err != nil {
		// Only a key length the FIPS 140 mode refuses errors; 32 bytes is not one.
		panic(fmt.Sprintf("scram: pbkdf2: %v", err))
	}
	clientKey := mac(salted, "Client Key")
	sum := sha256.Sum256(clientKey)
	return sum[:], mac(salted, "Server Key")
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// Parsed is a verifier taken apart.
type Parsed struct {
	Iterations           int
	Salt                 []byte
	StoredKey, ServerKey []byte
}

// Parse reads a verifier in PostgreSQL's text form.
func Parse(verifier string) (Parsed, error) {
	rest, ok := strings.CutPrefix(verifier, prefix)
	if !ok {
		return Parsed{}, errors.New("not a SCRAM-SHA-256 verifier: no " + prefix + " prefix")
	}
	params, keyPart, ok := strings.Cut(rest, "$")
	iter, salt, ok2 := strings.Cut(params, ":")
	stored, server, ok3 := strings.Cut(keyPart, ":")
	if !ok || !ok2 || !ok3 {
		return Parsed{}, errors.New("not a SCRAM-SHA-256 verifier: want " + prefix + "<iterations>:<salt>$<StoredKey>:<ServerKey>")
	}
	var p Parsed
	var err error
	if p.Iterations, err = strconv.Atoi(iter); err != nil || p.Iterations < 1 {
		return Parsed{}, fmt.Errorf("not a SCRAM-SHA-256 verifier: iterations %q", iter)
	}
	for _, f := range []struct {
		name, text string
		into       *[]byte
		size       int
	}{{"salt", salt, &p.Salt, 0}, {"StoredKey", stored, &p.StoredKey, sha256.Size}, {"ServerKey", server, &p.ServerKey, sha256.Size}} {
		b, err := base64.StdEncoding.Strict().DecodeString(f.text)
		if err != nil || len(b) == 0 || (f.size > 0 && len(b) != f.size) {
			return Parsed{}, fmt.Errorf("not a SCRAM-SHA-256 verifier: %s %q", f.name, f.text)
		}
		*f.into = b
	}
	return p, nil
}

// Verifies reports whether verifier is password's, with the verifier's own
// salt and iterations: the check PostgreSQL makes at a login, and as
// costly (the iterations are the point of a verifier).
func Verifies(verifier, password string) bool {
	p, err := Parse(verifier)
	if err != nil {
		return false
	}
	stored, server := keys(password, p.Salt, p.Iterations)
	return subtle.ConstantTimeCompare(stored, p.StoredKey) == 1 && subtle.ConstantTimeCompare(server, p.ServerKey) == 1
}

// Prepare is the password as pg_saslprep prepares it, or its bytes when
// pg_saslprep refuses it (what PostgreSQL then hashes). Like the server
// and libpq, which handle C strings, it ends the password at a NUL byte.
func Prepare(password string) []byte {
	if i := strings.IndexByte(password, 0); i >= 0 {
		password = password[:i]
	}
	if prepared, ok := saslprep(password); ok {
		return []byte(prepared)
	}
	return []byte(password)
}

// saslprep is pg_saslprep: false where it returns anything but success.
// PostgreSQL checks the prohibited characters and the bidirectional rules
// on the string after the mapping and before the normalization, not after
// it as RFC 3454 says; so does this.
func saslprep(s string) (string, bool) {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return s, true
	}
	if !utf8.ValidString(s) {
		return "", false
	}
	mapped := make([]rune, 0, len(s))
	for _, r := range s {
		switch {
		case stringprep.TableC1_2.Contains(r): // non-ASCII spaces
			mapped = append(mapped, ' ')
		case isMappedToNothing(r):
		default:
			mapped = append(mapped, r)
		}
	}
	if len(mapped) == 0 {
		return "", false
	}
	randAL := false
	for _, r := range mapped {
		if isProhibited(r) || stringprep.TableA1.Contains(r) {
			return "", false
		}
		randAL = randAL || stringprep.TableD1.Contains(r)
	}
	if randAL {
		for _, r := range mapped {
			if stringprep.TableD2.Contains(r) {
				return "", false
			}
		}
		if !stringprep.TableD1.Contains(mapped[0]) || !stringprep.TableD1.Contains(mapped[len(mapped)-1]) {
			return "", false
		}
	}
	return norm.NFKC.String(string(mapped)), true
}

// isMappedToNothing is RFC 3454 table B.1.
func isMappedToNothing(r rune) bool {
	to, ok := stringprep.TableB1.Map(r)
	return ok && len(to) == 0
}

// prohibited are the tables RFC 4013 section 2.3 prohibits.
var prohibited = []stringprep.Set{
	stringprep.TableC1_2, stringprep.TableC2_1, stringprep.TableC2_2, stringprep.TableC3,
	stringprep.TableC4, stringprep.TableC5, stringprep.TableC6, stringprep.TableC7,
	stringprep.TableC8, stringprep.TableC9,
}

func isProhibited(r rune) bool {
	for _, set := range prohibited {
		if set.Contains(r) {
			return true
		}
	}
	return false
}
