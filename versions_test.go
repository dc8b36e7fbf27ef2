package main

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestVersionTable keeps the table honest when it is edited: majors in
// order without gaps, real dates, each end of life in November about five
// years after the previous major's, and versionsAsOf a real day.
func TestVersionTable(t *testing.T) {
	if _, err := time.Parse(time.DateOnly, versionsAsOf); err != nil {
		t.Errorf("versionsAsOf %q: %v", versionsAsOf, err)
	}
	var prev time.Time
	for i, m := range pgMajors {
		eol, err := time.Parse(time.DateOnly, m.EndOfLife)
		if err != nil {
			t.Errorf("PostgreSQL %d: end of life %q: %v", m.Major, m.EndOfLife, err)
			continue
		}
		if eol.Month() != time.November || eol.Weekday() != time.Thursday {
			t.Errorf("PostgreSQL %d: end of life %s is not a Thursday in November (the minor-release day)", m.Major, m.EndOfLife)
		}
		if i > 0 {
			if m.Major != pgMajors[i-1].Major+1 {
				t.Errorf("PostgreSQL %d follows %d: the table must list every major in order", m.Major, pgMajors[i-1].Major)
			}
			if eol.Year() != prev.Year()+1 {
				t.Errorf("PostgreSQL %d: end of life %s is not a year after %s", m.Major, m.EndOfLife, prev.Format(time.DateOnly))
			}
		}
		prev = eol
	}
}

func TestParseVersion(t *testing.T) {
	p := field.NewPath("spec", "version")
	cases := map[string]struct {
		reason string
		in     string
		want   pgVersion
		err    string // empty: no error
	}{
		"Major":           {reason: "a major of the table", in: "16", want: pgVersion{Major: 16, Tag: "16"}},
		"MajorMinor":      {reason: "a released minor", in: "16.4", want: pgVersion{Major: 16, Tag: "16.4"}},
		"PastEndOfLife":   {reason: "a major past its end of life is accepted", in: "14", want: pgVersion{Major: 14, Tag: "14"}},
		"MinorZero":       {reason: "the first release of a major", in: "18.0", want: pgVersion{Major: 18, Tag: "18.0"}},
		"MinorAtBound":    {reason: "the highest minor that could exist", in: "15.30", want: pgVersion{Major: 15, Tag: "15.30"}},
		"MinorImpossible": {reason: "issue 12: 16.99 cannot exist; its rollout would stick", in: "16.99", err: `spec.version: Invalid value: "16.99": PostgreSQL 16 has no minor 99 and never will`},
		"MinorOverflow":   {reason: "a minor that does not fit an int", in: "16.99999999999999999999", err: "PostgreSQL 16 has no minor 99999999999999999999"},
		"FutureMajor":     {reason: "a major that does not exist yet", in: "19", err: `spec.version: Invalid value: "19": PostgreSQL 19 does not exist yet (this function knows the majors released by ` + versionsAsOf + `); supported majors: 15, 16, 17, 18 (also accepted, past their end of life: 14)`},
		"FarFuture":       {reason: "a major far in the future", in: "99", err: "PostgreSQL 99 does not exist yet"},
		"TooOld":          {reason: "a major older than the table", in: "13", err: `supported values: "14", "15", "16", "17", "18"`},
		"Empty":           {reason: "no version", in: "", err: "spec.version: Required value"},
		"Patch":           {reason: "three parts", in: "16.4.1", err: "major or major.minor"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseVersion(p, tc.in)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("%s: parseVersion(%q): %v", tc.reason, tc.in, err)
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("%s: parseVersion(%q) (-want +got):\n%s", tc.reason, tc.in, d)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s: parseVersion(%q) = %+v, want an error containing %q", tc.reason, tc.in, got, tc.err)
			}
			if !regexp.MustCompile(regexp.QuoteMeta(tc.err)).MatchString(err.Error()) {
				t.Errorf("%s: parseVersion(%q) error\n  %s\nwant it to contain\n  %s", tc.reason, tc.in, err, tc.err)
			}
		})
	}
}

func TestVersionCondition(t *testing.T) {
	cases := map[string]struct {
		reason string
		major  int
		want   condition
	}{
		"Supported": {"a supported major", 16, condition{condVersionSupported, fnv1.Status_STATUS_CONDITION_TRUE, "Supported", "PostgreSQL 16 is supported until 2028-11-09"}},
		"EndOfLife": {"14 reached its end of life on 2026-11-12", 14, condition{condVersionSupported, fnv1.Status_STATUS_CONDITION_FALSE, "EndOfLife",
			"PostgreSQL 14 reached its end of life on 2026-11-12 and gets no more fixes, security fixes included; supported majors: 15, 16, 17, 18. To move, create a new Database on a supported major with spec.restoreFrom naming this one"}},
		"Unknown": {"a running major the table dropped", 12, condition{condVersionSupported, fnv1.Status_STATUS_CONDITION_FALSE, "UnknownMajor",
			"PostgreSQL 12 is not in this function's version table; supported majors: 15, 16, 17, 18"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, versionCondition(&plan{Major: tc.major})); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestXRDVersionPattern: both XRDs admit exactly the majors of the table and
// the minors parseVersion accepts, so that admission and the function agree
// (a refusal at admission is the better one: kubectl apply fails at once).
func TestXRDVersionPattern(t *testing.T) {
	for _, path := range []string{"example/xrd.yaml", "example/legacy/xrd.yaml"} {
		t.Run(path, func(t *testing.T) {
			pattern := xrdSpecProperty(t, path, "version")["pattern"].(string)
			re, err := regexp.Compile(pattern)
			if err != nil {
				t.Fatalf("pattern %q: %v", pattern, err)
			}
			for major := range 100 {
				for _, v := range []string{strconv.Itoa(major), strconv.Itoa(major) + ".0", strconv.Itoa(major) + "." + strconv.Itoa(maxMinor), strconv.Itoa(major) + "." + strconv.Itoa(maxMinor+1)} {
					_, ferr := parseVersion(field.NewPath("spec", "version"), v)
					if admitted, accepted := re.MatchString(v), ferr == nil; admitted != accepted {
						t.Errorf("version %q: admitted by the XRD pattern %v, accepted by the function %v (%v)", v, admitted, accepted, ferr)
					}
				}
			}
		})
	}
}

// xrdSpecProperty returns the schema of spec.<name> in the XRD's first
// version.
func xrdSpecProperty(t *testing.T, path, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var xrd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties map[string]map[string]any `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &xrd); err != nil {
		t.Fatal(err)
	}
	if len(xrd.Spec.Versions) == 0 {
		t.Fatalf("%s: no versions", path)
	}
	p, ok := xrd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties[name]
	if !ok {
		t.Fatalf("%s: no spec.%s", path, name)
	}
	return p
}
