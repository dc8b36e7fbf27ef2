package main

import (
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestImageFor(t *testing.T) {
	pinned := map[string]string{
		"15":   "registry.example.com/pg:15.8@" + testDigest,
		"16":   "registry.example.com/pg@" + testDigest,
		"17.2": "registry.example.com/pg:17.2",
	}
	cases := map[string]struct {
		reason  string
		repo    string
		images  map[string]string
		version pgVersion
		want    string
	}{
		"Default":            {"no input: the official image, tag spec.version", "postgres", nil, pgVersion{16, "16"}, "postgres:16"},
		"Mirror":             {"a mirror repository", "registry.example.com/mirror/postgres", nil, pgVersion{16, "16.4"}, "registry.example.com/mirror/postgres:16.4"},
		"MajorPinned":        {"the major's entry", "postgres", pinned, pgVersion{15, "15"}, pinned["15"]},
		"MajorDigestOnly":    {"an entry pinned by digest alone", "postgres", pinned, pgVersion{16, "16"}, pinned["16"]},
		"MinorEntry":         {"an entry for exactly the major.minor", "postgres", pinned, pgVersion{17, "17.2"}, "registry.example.com/pg:17.2"},
		"MinorOfMajorEntry":  {"the major's entry is tagged exactly the minor asked for", "postgres", pinned, pgVersion{15, "15.8"}, pinned["15"]},
		"OtherMinor":         {"a minor the major's entry is not: the user's minor is never swapped", "registry.example.com/pg", pinned, pgVersion{15, "15.9"}, "registry.example.com/pg:15.9"},
		"MinorDigestOnly":    {"a digest-only major entry names no minor", "postgres", pinned, pgVersion{16, "16.4"}, "postgres:16.4"},
		"MajorWithMinorOnly": {"only a major.minor entry: the bare major is not it", "postgres", pinned, pgVersion{17, "17"}, "postgres:17"},
		"NoEntry":            {"a major without an entry", "postgres", pinned, pgVersion{18, "18"}, "postgres:18"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := imageFor(tc.repo, tc.images, tc.version); got != tc.want {
				t.Errorf("%s: imageFor(%q, %v) = %q, want %q", tc.reason, tc.repo, tc.version, got, tc.want)
			}
		})
	}
}

func TestResolveImages(t *testing.T) {
	p := field.NewPath("input", "images")
	cases := map[string]struct {
		reason string
		in     map[string]string
		want   map[string]string
		errs   []string // fragments of the one error; empty: no error
	}{
		"None": {reason: "no images", in: nil, want: nil},
		"Valid": {reason: "tags, digests, both, a mirror with a port",
			in:   map[string]string{"14": "postgres:14.20", "15": "registry.example.com:5000/pg:15.8@" + testDigest, "16": "pg@" + testDigest, "17.2": "mirror.local/library/postgres:17.2-bookworm", "18": "postgres:latest"},
			want: map[string]string{"14": "postgres:14.20", "15": "registry.example.com:5000/pg:15.8@" + testDigest, "16": "pg@" + testDigest, "17.2": "mirror.local/library/postgres:17.2-bookworm", "18": "postgres:latest"}},
		"BadKey": {reason: "a key that is no version", in: map[string]string{"sixteen": "postgres:16"}, want: map[string]string{},
			errs: []string{`input.images[sixteen]: Invalid value: "sixteen": must be a PostgreSQL version spec.version can hold`}},
		"FutureKey": {reason: "a major that does not exist", in: map[string]string{"19": "postgres:19"}, want: map[string]string{},
			errs: []string{"input.images[19]", "PostgreSQL 19 does not exist yet"}},
		"NoTag": {reason: "a bare repository floats", in: map[string]string{"16": "registry.example.com/pg"}, want: map[string]string{},
			errs: []string{`input.images[16]: Invalid value: "registry.example.com/pg": must pin a tag or a digest`}},
		"Uppercase": {reason: "not a reference", in: map[string]string{"16": "Registry/PG:16"}, want: map[string]string{},
			errs: []string{"input.images[16]", "must be an image reference"}},
		"BadDigest": {reason: "a digest that is no digest", in: map[string]string{"16": "pg@sha256:abc"}, want: map[string]string{},
			errs: []string{"input.images[16]", "must be an image reference"}},
		"OtherMajor": {reason: "an entry that would upgrade a major in place", in: map[string]string{"15": "postgres:16.2"}, want: map[string]string{},
			errs: []string{`input.images[15]: Invalid value: "postgres:16.2": the tag "16.2" is PostgreSQL 16, not 15`}},
		"TooLong": {reason: "an absurd reference", in: map[string]string{"16": "r/" + strings.Repeat("a", 600) + ":16"}, want: map[string]string{},
			errs: []string{"input.images[16]"}},
		"OneBadOneGood": {reason: "errors do not hide the good entries", in: map[string]string{"15": "pg", "16": "pg:16"}, want: map[string]string{"16": "pg:16"},
			errs: []string{"input.images[15]"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, errs := resolveImages(p, tc.in)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s: images (-want +got):\n%s", tc.reason, d)
			}
			if (len(errs) == 0) != (len(tc.errs) == 0) || len(errs) > 1 {
				t.Fatalf("%s: errors %v, want one containing %q", tc.reason, errs, tc.errs)
			}
			for _, w := range tc.errs {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("%s: error %q does not contain %q", tc.reason, errs[0].Error(), w)
				}
			}
		})
	}
}

func TestValidateRepository(t *testing.T) {
	cases := map[string]struct {
		repo string
		ok   bool
	}{
		"Official":   {"postgres", true},
		"Mirror":     {"registry.example.com/mirror/postgres", true},
		"MirrorPort": {"registry.example.com:5000/postgres", true},
		"Tag":        {"postgres:16", false},
		"Digest":     {"postgres@" + testDigest, false},
		"Uppercase":  {"Postgres", false},
		"Empty":      {"", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := validateRepository(field.NewPath("input", "image"), tc.repo)
			if (len(errs) == 0) != tc.ok {
				t.Errorf("validateRepository(%q) = %v, want ok %v", tc.repo, errs, tc.ok)
			}
			for _, e := range errs {
				if !strings.Contains(e.Error(), "input.image") {
					t.Errorf("error %q does not name input.image", e)
				}
			}
		})
	}
}

func TestImageVersion(t *testing.T) {
	cases := map[string]string{
		"postgres:16":   "16",
		"postgres:16.4": "16.4",
		"registry.example.com:5000/pg:15.8-bookworm":  "15.8",
		"registry.example.com/pg:15.8@" + testDigest:  "15.8",
		"registry.example.com/pg@" + testDigest:       "",
		"postgres:latest":                             "",
		"postgres":                                    "",
		"Not A Reference:17":                          "17",
		"registry.example.com:5000/Not_Valid/pg:16.1": "16.1",
	}
	for img, want := range cases {
		if got, _ := imageVersion(img); got != want {
			t.Errorf("imageVersion(%q) = %q, want %q", img, got, want)
		}
	}
}

// TestPinnedImageEverywhere: with the input's images, every container the
// function composes (instances, password sync, backup, restore) runs the
// pinned reference, and status.version still says the version.
func TestPinnedImageEverywhere(t *testing.T) {
	const pin = "registry.example.com/pg:17.2@" + testDigest
	xr := yamlStruct(t, `
apiVersion: example.com/v1
kind: Database
metadata: {name: orders-v17, namespace: shop}
spec: {version: "17", size: medium, backup: {enabled: true}, restoreFrom: {database: orders}}
`)
	in := yamlStruct(t, "apiVersion: database.fn.example.com/v1beta1\nkind: Input\nimage: registry.example.com/mirror/postgres\nimages: {\"17\": \""+pin+"\"}\n")
	req := xrRequest(xr, in)
	rsp := runTest(t, req)
	if len(rsp.GetResults()) > 0 {
		t.Fatalf("unexpected results: %v", rsp.GetResults())
	}
	got := map[string]string{}
	for name, r := range rsp.GetDesired().GetResources() {
		collectImages(name, r.GetResource().AsMap(), got)
	}
	want := map[string]string{}
	for _, k := range []string{"backup/backup", "restore/restore", "statefulset/postgres", "statefulset/password-sync"} {
		want[k] = pin
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("container images (-want +got):\n%s", d)
	}

	req.Observed.Resources = observedFrom(t, rsp, true)
	running := runTest(t, req)
	if v := running.GetDesired().GetComposite().GetResource().GetFields()["status"].GetStructValue().GetFields()["version"].GetStringValue(); v != "17.2" {
		t.Errorf("status.version = %q, want 17.2 (the pinned tag)", v)
	}
}

// collectImages records every container's image under "resource/container".
func collectImages(resource string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		if img, ok := x["image"].(string); ok {
			if n, ok := x["name"].(string); ok {
				out[resource+"/"+n] = img
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			collectImages(resource, x[k], out)
		}
	case []any:
		for _, e := range x {
			collectImages(resource, e, out)
		}
	}
}
