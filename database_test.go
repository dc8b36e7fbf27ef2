package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestDeprecatedBackupFields: the original Database CRD's backup_enabled and
// backup_schedule are the same fields as backup.enabled and backup.schedule
// (issue 16): either spelling sets them, with the same defaults; both with
// different values is an error naming both; the deprecated ones are recorded
// for the SpecApplied condition.
func TestDeprecatedBackupFields(t *testing.T) {
	type want struct {
		Enabled    bool
		Schedule   string
		Deprecated []deprecatedField
	}
	cases := map[string]struct {
		reason string
		spec   string
		want   want
		err    []string // fragments of the error; empty: no error
	}{
		"Neither": {reason: "the defaults", spec: `{}`,
			want: want{Enabled: false, Schedule: "0 2 * * *"}},
		"NestedOnly": {reason: "the current spelling", spec: `{backup: {enabled: true, schedule: "0 3 * * *"}}`,
			want: want{Enabled: true, Schedule: "0 3 * * *"}},
		"Original": {reason: "the original manifest", spec: `{backup_enabled: true, backup_schedule: "0 2 * * *"}`,
			want: want{Enabled: true, Schedule: "0 2 * * *", Deprecated: []deprecatedField{
				{"spec.backup_enabled", "spec.backup.enabled", "true"},
				{"spec.backup_schedule", "spec.backup.schedule", `"0 2 * * *"`}}}},
		"FlatEnabledOnly": {reason: "the flat schedule's default is the nested one's", spec: `{backup_enabled: true}`,
			want: want{Enabled: true, Schedule: "0 2 * * *", Deprecated: []deprecatedField{{"spec.backup_enabled", "spec.backup.enabled", "true"}}}},
		"FlatScheduleOnly": {reason: "a schedule with backups off by default", spec: `{backup_schedule: "@daily"}`,
			want: want{Enabled: false, Schedule: "@daily", Deprecated: []deprecatedField{{"spec.backup_schedule", "spec.backup.schedule", `"@daily"`}}}},
		"Mixed": {reason: "one field in each spelling", spec: `{backup_enabled: true, backup: {schedule: "0 4 * * *", retention: 3}}`,
			want: want{Enabled: true, Schedule: "0 4 * * *", Deprecated: []deprecatedField{{"spec.backup_enabled", "spec.backup.enabled", "true"}}}},
		"BothEqual": {reason: "both spellings agreeing", spec: `{backup_enabled: true, backup_schedule: "0 2 * * *", backup: {enabled: true, schedule: "0 2 * * *"}}`,
			want: want{Enabled: true, Schedule: "0 2 * * *", Deprecated: []deprecatedField{
				{"spec.backup_enabled", "spec.backup.enabled", "true"},
				{"spec.backup_schedule", "spec.backup.schedule", `"0 2 * * *"`}}}},
		"FlatEmptySchedule": {reason: `"" is unset, as in spec.backup.schedule`, spec: `{backup_enabled: true, backup_schedule: ""}`,
			want: want{Enabled: true, Schedule: "0 2 * * *", Deprecated: []deprecatedField{{"spec.backup_enabled", "spec.backup.enabled", "true"}}}},
		"EnabledDiffer": {reason: "the two spellings disagree", spec: `{backup_enabled: true, backup: {enabled: false}}`,
			err: []string{"spec.backup_enabled: Invalid value: true: differs from spec.backup.enabled (false)", "set only spec.backup.enabled"}},
		"ScheduleDiffer": {reason: "the two spellings disagree", spec: `{backup_schedule: "0 3 * * *", backup: {schedule: "0 2 * * *"}}`,
			err: []string{`spec.backup_schedule: Invalid value: "0 3 * * *": differs from spec.backup.schedule ("0 2 * * *")`, "spec.backup_schedule is the deprecated spelling of spec.backup.schedule"}},
		"FlatBadSchedule": {reason: "a bad schedule is reported where it was written", spec: `{backup_enabled: true, backup_schedule: "nightly"}`,
			err: []string{`spec.backup_schedule: Invalid value: "nightly"`, "5-field cron"}},
		"FlatWrongType": {reason: `backup_enabled: "yes"`, spec: `{backup_enabled: "yes"}`,
			err: []string{"spec.backup_enabled", "boolean"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := strings.TrimSuffix(strings.TrimPrefix(tc.spec, "{"), "}")
			if spec != "" {
				spec = ", " + spec
			}
			xr := yamlStruct(t, "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: {version: \"16\", size: small"+spec+"}")
			cfg, errs := parseInput(nil)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			db, errs := parseDatabase(xr, cfg)
			if len(tc.err) > 0 {
				if len(errs) == 0 {
					t.Fatalf("%s: no error, want one containing %q", tc.reason, tc.err)
				}
				for _, w := range tc.err {
					if !strings.Contains(errs.ToAggregate().Error(), w) {
						t.Errorf("%s: error %q does not contain %q", tc.reason, errs.ToAggregate().Error(), w)
					}
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("%s: %v", tc.reason, errs)
			}
			got := want{Enabled: db.Backup.Enabled, Schedule: db.Backup.Schedule, Deprecated: db.Deprecated}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}

// TestSpecApplied: the condition names the deprecated spellings in use and
// where to move them, whether or not a change is blocked.
func TestSpecApplied(t *testing.T) {
	both := []deprecatedField{{"spec.backup_enabled", "spec.backup.enabled", "true"}, {"spec.backup_schedule", "spec.backup.schedule", `"0 2 * * *"`}}
	shrink := blocked{reasonStorageShrink, "spec.storage.size 10Gi is smaller than the data volumes' 20Gi"}
	cases := map[string]struct {
		reason     string
		deprecated []deprecatedField
		blocked    []blocked
		want       condition
	}{
		"Applied": {"nothing to say", nil, nil,
			condition{condSpecApplied, fnv1.Status_STATUS_CONDITION_TRUE, "Applied", "every field of spec is applied"}},
		"Deprecated": {"the original manifest", both, nil,
			condition{condSpecApplied, fnv1.Status_STATUS_CONDITION_TRUE, "AppliedDeprecatedFields",
				`every field of spec is applied; spec.backup_enabled and spec.backup_schedule are deprecated (the original Database CRD's spelling): move to spec.backup.enabled: true, spec.backup.schedule: "0 2 * * *"`}},
		"OneDeprecated": {"one flat field", both[:1], nil,
			condition{condSpecApplied, fnv1.Status_STATUS_CONDITION_TRUE, "AppliedDeprecatedFields",
				`every field of spec is applied; spec.backup_enabled is deprecated (the original Database CRD's spelling): move to spec.backup.enabled: true`}},
		"BlockedAndDeprecated": {"a blocked change keeps its reason", both[1:], []blocked{shrink},
			condition{condSpecApplied, fnv1.Status_STATUS_CONDITION_FALSE, reasonStorageShrink,
				`spec.storage.size 10Gi is smaller than the data volumes' 20Gi; spec.backup_schedule is deprecated (the original Database CRD's spelling): move to spec.backup.schedule: "0 2 * * *"`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := specApplied(&database{Deprecated: tc.deprecated}, &plan{Blocked: tc.blocked})
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, d)
			}
		})
	}
}
