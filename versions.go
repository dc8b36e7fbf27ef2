package main

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// pgMajor is one PostgreSQL major this function composes, with its end of
// life as the PostgreSQL versioning policy states it: five years after the
// major's first release, on that November's minor-release day.
type pgMajor struct {
	Major     int
	EndOfLife string // YYYY-MM-DD
}

// pgMajors are the majors spec.version accepts, oldest first. To update:
// add a major when the PostgreSQL project releases it, widen the pattern of
// spec.version in example/xrd.yaml and example/legacy/xrd.yaml (a test
// compares them with this table), and move versionsAsOf to the day of the
// update. A major is only dropped when the function stops composing it.
var pgMajors = []pgMajor{
	{14, "2026-11-12"},
	{15, "2027-11-11"},
	{16, "2028-11-09"},
	{17, "2029-11-08"},
	{18, "2030-11-14"},
}

// versionsAsOf is the day pgMajors was last checked, and the day against
// which end of life is judged. The function never reads the clock: the same
// request must give the same response on every call (Crossplane's function
// specification; TestDeterministic), and a condition that flipped at
// midnight would make every Database change status by itself. So a major turns "past its end of life" with the release of the
// function that moves this date, the same way a new major becomes
// acceptable; a release a year reviews every entry.
const versionsAsOf = "2026-11-30"

// maxMinor bounds the minor of spec.version. The project releases a minor
// about every three months for the five supported years, plus the odd
// out-of-cycle fix: no major has come near 30 minors (the most since 10 is
// about 23). A minor above the bound cannot exist, and an image tag that
// cannot exist would leave the first pod of the rollout failing to pull and
// the StatefulSet stuck (OrderedReady), so it is refused. A minor within the
// bound that is not released yet is not refused: a table of released
// minors goes stale within three months and would refuse real ones.
const maxMinor = 30

// lookupMajor returns the table entry of a major.
func lookupMajor(major int) (pgMajor, bool) {
	for _, m := range pgMajors {
		if m.Major == major {
			return m, true
		}
	}
	return pgMajor{}, false
}

// pastEndOfLife reports whether m reached its end of life by versionsAsOf.
// Dates are ISO 8601, so comparing the strings compares the days.
func (m pgMajor) pastEndOfLife() bool { return m.EndOfLife <= versionsAsOf }

// majorNames returns the majors of the table as strings, oldest first.
func majorNames() []string {
	out := make([]string, 0, len(pgMajors))
	for _, m := range pgMajors {
		out = append(out, strconv.Itoa(m.Major))
	}
	return out
}

// supportedMajors lists the majors not past their end of life, for messages.
func supportedMajors() string {
	var out []string
	for _, m := range pgMajors {
		if !m.pastEndOfLife() {
			out = append(out, strconv.Itoa(m.Major))
		}
	}
	return strings.Join(out, ", ")
}

// pastEndOfLifeNote names the majors still accepted past their end of life.
func pastEndOfLifeNote() string {
	var out []string
	for _, m := range pgMajors {
		if m.pastEndOfLife() {
			out = append(out, strconv.Itoa(m.Major))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (also accepted, past their end of life: " + strings.Join(out, ", ") + ")"
}

// parseVersion checks spec.version against the table: the major must be one
// the function composes, and the minor one that can exist.
func parseVersion(p *field.Path, s string) (pgVersion, *field.Error) {
	first, last := pgMajors[0].Major, pgMajors[len(pgMajors)-1].Major
	if s == "" {
		return pgVersion{}, field.Required(p, fmt.Sprintf("a PostgreSQL major (%d to %d) or major.minor, e.g. \"16\" or \"16.4\"", first, last))
	}
	m := versionPattern.FindStringSubmatch(s)
	if m == nil {
		return pgVersion{}, field.Invalid(p, s, "must be a PostgreSQL major or major.minor, e.g. \"16\" or \"16.4\"")
	}
	major, err := strconv.Atoi(m[1])
	if err != nil || major < first {
		return pgVersion{}, field.NotSupported(p, s, majorNames())
	}
	if _, ok := lookupMajor(major); !ok {
		return pgVersion{}, field.Invalid(p, s, fmt.Sprintf(
			"PostgreSQL %s does not exist yet (this function knows the majors released by %s); supported majors: %s%s",
			m[1], versionsAsOf, supportedMajors(), pastEndOfLifeNote()))
	}
	if m[2] != "" {
		if minor, err := strconv.Atoi(m[2]); err != nil || minor > maxMinor {
			return pgVersion{}, field.Invalid(p, s, fmt.Sprintf(
				"PostgreSQL %d has no minor %s and never will (a major gets far fewer than %d minors); use the major %q to run its latest minor, or a released major.minor",
				major, m[2], maxMinor, strconv.Itoa(major)))
		}
	}
	return pgVersion{Major: major, Tag: s}, nil
}

// condVersionSupported says whether the PostgreSQL major the Database runs
// still gets fixes. Nothing is blocked past end of life: the data is the
// user's, and the way off an old major (restore into a new Database) needs
// the old one running.
const condVersionSupported = "VersionSupported"

// versionCondition judges the major the StatefulSet runs (p.Major): after a
// refused major change that is the running one, not spec.version's.
func versionCondition(p *plan) condition {
	const typ = condVersionSupported
	m, ok := lookupMajor(p.Major)
	if !ok {
		// Unreachable: parseVersion accepts only majors of the table, and a
		// running major outside it is one the table dropped.
		return condition{typ, fnv1.Status_STATUS_CONDITION_FALSE, "UnknownMajor", fmt.Sprintf(
			"PostgreSQL %d is not in this function's version table; supported majors: %s", p.Major, supportedMajors())}
	}
	if m.pastEndOfLife() {
		return condition{typ, fnv1.Status_STATUS_CONDITION_FALSE, "EndOfLife", fmt.Sprintf(
			"PostgreSQL %d reached its end of life on %s and gets no more fixes, security fixes included; supported majors: %s. To move, create a new Database on a supported major with spec.restoreFrom naming this one",
			m.Major, m.EndOfLife, supportedMajors())}
	}
	return condition{typ, fnv1.Status_STATUS_CONDITION_TRUE, "Supported", fmt.Sprintf(
		"PostgreSQL %d is supported until %s", m.Major, m.EndOfLife)}
}
