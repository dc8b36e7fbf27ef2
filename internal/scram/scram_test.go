package scram

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fromPostgres are verifiers PostgreSQL 15 stored for CREATE ROLE ...
// PASSWORD '<password>' with password_encryption scram-sha-256 (in a
// SQL_ASCII database, so that bytes that are not UTF-8 reach it too), each
// with its own random salt. Recomputed with that salt, ours must be the
// same byte for byte: a verifier libpq does not agree with is a role nobody
// can log in as. Between them they take every path of pg_saslprep: ASCII
// as is (controls and quotes included), a non-ASCII space mapped to a space,
// characters mapped to nothing (alone: empty after the mapping, so raw
// bytes), NFKC (fullwidth letters, a ligature, a Roman numeral, a combining
// accent), right-to-left text that obeys the bidirectional rules and three
// that do not, a control character and private use after a non-ASCII
// letter (prohibited), a language tag (prohibited), and bytes that are not
// UTF-8. scripts TestPasswords checks against a live server as well.
var fromPostgres = []struct{ password, verifier string }{
	{"pencil", "SCRAM-SHA-256$4096:I7awcncn4GGCobpmJqDRcw==$RBP2zOZxq6pkoa6Cv/a7bw+TmkRpGa9Z+A9ri+yN/Nw=:i4p6L4ZEHqXFCsGxvX7ot7GRbyR/mZzByde6fV0Z+qY="},
	{"it's \\ quoted", "SCRAM-SHA-256$4096:C1icxpusxaaElEcxSnqncA==$w8z7lgDPDyfg+tQSg8H3mwk8kC3wqLcKcSLQPVKgtMQ=:oBST7EFMxhcuLk9Z+cFU9Q1SC4w8qIVgE02GHGbfYaY="},
	{"pässwörd", "SCRAM-SHA-256$4096:aS9Yb0GTKXP5YKqev9yEMQ==$MmMZs3byCb0FNVHC/RKWkhRrqNcwgfDg2Jwz8/pkI8A=:A7ygM7FwUm62pvaoZeFQvJDjG9RcxPLWGfpNfeIqXdw="},
	{"ｐａｓｓ１２", "SCRAM-SHA-256$4096:GFKJyHDM8VH6OU2+xojm8g==$CfhDi1nSLaIMaYNDAUwM0sn8XA8dyRw4CFB4HeC458A=:xQb/68NNWFSbHY1Iz3MKGCNOINRoXW/+pvFfs1SOp1E="},
	{"pass\u00a0word", "SCRAM-SHA-256$4096:9gTbhoUHZNd56BxU5gFivw==$lwGZD/Mh25LE7Yt1P7ArQAG6aISVTHZunZ9EqVNUTec=:FoDkoMoF8uYnY0EMVqAEeGdXtqOfGh8XWbOgtmJkQyg="},
	{"pass\u00adword", "SCRAM-SHA-256$4096:l12fq/78Rxi/lMZ9QP64wA==$0q+sLUMLvS1ycCh/D79B2+4eeysu52POGYlKbhj1DbE=:TR7SwkhO9y/gqIVO+v3AKoEUfL7GCv27VhnnNDOFx78="},
	{"\u00ad", "SCRAM-SHA-256$4096:XTZx6TyOs4eDPlQgnRU/bg==$jZpIQZMvO4h8XLJx3wqwZDD8XQ5kDyhbVC0gFcl0Mqc=:/IXBoS67ie2oXyeowxtUrF4RkonHf4ufwi3Sspkzmp4="},
	{"\u00a0", "SCRAM-SHA-256$4096:FhxnwE3Hf1uUTYVEfKhskg==$vV3T5Goqf7uuvtGgShfXo4s7Zl48MzmOKgxSloIODw8=:PJBz0HbYr7bpFmUI2X6/8G5QvcjM4YXVRawptzhn+CY="},
	{"é", "SCRAM-SHA-256$4096:U5oyPlJ/FQ2BFtego3B8pA==$2cftGRzSWkgyvNpQa4gdzao1msW0vK4w9ID2b+JRjtw=:axR6hnyq3PaEQe3tjaTqyQz8T6TT4YFiReOhYfGxOBQ="},
	{"Ⅳ", "SCRAM-SHA-256$4096:ETompI2oLC4PQqwtTqNeIw==$axxe56xwo0ddVS1flSURafQA1sKBKm9QMyNZv9s756I=:HJ0AxbihndTwEdFmaK8eHzYa67KDnbcqTQ/k6XsXMoY="},
	{"ﬁ", "SCRAM-SHA-256$4096:t45vWA8G/yJcHa0WOvG1rQ==$T5hhOTChGWMN1MmvI/mwrytkebxBWtc0raKQ5ygInB4=:G5S8I16E/fhKeCb2sOLd4EHOKuT7BlhNQd3oaoUMz2c="},
	{"\u200b", "SCRAM-SHA-256$4096:cdrJkM6H5TIZ3OHvgMr6XQ==$hyw35QK/dO0fAWogjbodeYgDi1VIM8LvxcxXmhs/C40=:cvyyhgjMD0SweLW/WgRO531JL3erZqHjNMJAVvwLKDg="},
	{"אב", "SCRAM-SHA-256$4096:Q8N/otuoHpNrmk617YP8Hw==$uyKvDBB8coywrpKkkIWLt7Sbu9tVPLHDSViNjFoiZ1E=:6RG8NEufk9cqMDnjhjK6kThpq7Wuxqb5qmukXJAHfUs="},
	{"אaב", "SCRAM-SHA-256$4096:f8PyvWuSHC9h+2PWQNmoyw==$zG7tz5Nu6IXtPfCR3eYU9qp5zwH15X+0MbQaUeCOMfc=:mm6qbI4MVNz/IXwq1wT8PSQbwsDYmRz1CDR1RUMLbiw="},
	{"aا", "SCRAM-SHA-256$4096:kZHN1ze2qK7heipyFWOn4Q==$1qZmKG0JnKGM6fHuTkudWdgcjUY6bc4l8LRuKO8ZCdM=:LVOdL3gzbPuCR7VYuffCNtg4bDLCvQenY11wUQHcEPI="},
	{"ا1", "SCRAM-SHA-256$4096:O7X3tWuLWVWBBTWlPAKIwQ==$OFYCOgwxzwOJlJGKWEp0BLaIgfz3WFsjcwcBllT0GFY=:XqDv8gp2PW613H4eHN2p1HiEH5+A0PnQXQAU5qh8eYs="},
	{"x\aé", "SCRAM-SHA-256$4096:jSjk+cUVjZeEUkFhhmOqqQ==$4vTBs28Dp+N68xpOiZklKshdOP3NvU7UUKUjhfOYdRo=:dsDihFWkAYKkFttTuCgmgmwfcfLZUmt7CmtJPxaQGbc="},
	{"\ue000x", "SCRAM-SHA-256$4096:nbBllnOQBkyaEsWZBPbZPA==$L1rNStObUm+pAlyIFx38fQfIJJ8Z/sIc9DWKbMWmnKw=:MEJMzJ4bgycB48tJBmTwPf5bGRLWT0VkP9rJ8BVYzLc="},
	{"\U000e0001", "SCRAM-SHA-256$4096:ugDIALWGhoA85Kti2jTIvw==$aztSANrGN1jkRxI87hYYSWOtpFkzdjFc49L7XnIlyH8=:viX0RpjFjYoYfZgah38w3FCdFIAgCCHCCn7d/B/AXPM="},
	{"p\xe4ss", "SCRAM-SHA-256$4096:qFry6pNTvfUooQRu3PX6oA==$EpA1/oWP/+vWzYQuTVa5AeYkVWvzZc37DylCizBPyNc=:O963derTqRep//pZDVGQuU1xoHE7QOjbXIIZSsC3Jik="},
	{"\xff\xfe", "SCRAM-SHA-256$4096:7/7kVFbsy4DD/bmY7u+DeA==$cnCFIDNTVwnBTitjFDeizLOTq7ioT2URoRIefKRwtQc=:M+v0PrP25XarBweU6GjvuV7jDDEc2YQpHdIQ8LL64ik="},
	{"é\x80", "SCRAM-SHA-256$4096:81/5GoOJUwvig4iceBzomA==$ti7C0yLBljUCc4LiJeO/GixFdW874pc5tjnHww0WCFI=:jy6jPgnLcoLEkXhsjImqKMs/Mn7GblH2qJ01BQY8C2c="},
}

func TestVerifierIsPostgresOwn(t *testing.T) {
	for _, tc := range fromPostgres {
		p, err := Parse(tc.verifier)
		if err != nil {
			t.Fatalf("%q: %v", tc.password, err)
		}
		if got := Verifier(tc.password, p.Salt, p.Iterations); got != tc.verifier {
			t.Errorf("%q: verifier\n%s, PostgreSQL's\n%s", tc.password, got, tc.verifier)
		}
		if !Verifies(tc.verifier, tc.password) {
			t.Errorf("%q: Verifies(PostgreSQL's verifier) is false", tc.password)
		}
	}
}

func TestVerifies(t *testing.T) {
	salt := []byte("0123456789abcdef")
	v := Verifier("secret", salt, Iterations)
	for _, tc := range []struct {
		name, verifier, password string
		want                     bool
	}{
		{"its own password", v, "secret", true},
		{"another password", v, "Secret", false},
		{"the password ends at a NUL, as in libpq", v, "secret\x00more", true},
		{"fewer iterations are another verifier", Verifier("secret", salt, 4095), "secret", true},
		{"a ServerKey edited", v[:len(v)-5] + "AAAA=", "secret", false},
		{"not a verifier (md5)", "md5" + strings.Repeat("0", 32), "secret", false},
		{"empty", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Verifies(tc.verifier, tc.password); got != tc.want {
				t.Errorf("Verifies(%q, %q) = %v, want %v", tc.verifier, tc.password, got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	short := base64.StdEncoding.EncodeToString(make([]byte, 31))
	good := "SCRAM-SHA-256$4096:c2FsdA==$" + key + ":" + key
	p, err := Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Parsed{Iterations: 4096, Salt: []byte("salt"), StoredKey: make([]byte, 32), ServerKey: make([]byte, 32)}, p); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	for _, bad := range []string{
		"",
		"SCRAM-SHA-1$4096:c2FsdA==$" + key + ":" + key,
		"SCRAM-SHA-256$4096:c2FsdA==$" + key,
		"SCRAM-SHA-256$4096$" + key + ":" + key,
		"SCRAM-SHA-256$0:c2FsdA==$" + key + ":" + key,
		"SCRAM-SHA-256$x:c2FsdA==$" + key + ":" + key,
		"SCRAM-SHA-256$4096:$" + key + ":" + key,
		"SCRAM-SHA-256$4096:c2FsdA$" + key + ":" + key, // unpadded
		"SCRAM-SHA-256$4096:c2FsdA==$" + short + ":" + key,
		"SCRAM-SHA-256$4096:c2FsdA==$" + key + ":" + key + "x",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// BenchmarkVerifier is what one verifier costs: the iterations are the
// point of a verifier, so a reconcile must not compute one per role every
// time (see the function's verifier cache).
func BenchmarkVerifier(b *testing.B) {
	salt := []byte("0123456789abcdef")
	for b.Loop() {
		Verifier("Zl3kqYq6yT1nB8vR2cW5xH0pJ4mD7sA9", salt, Iterations)
	}
}
