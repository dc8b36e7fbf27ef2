package main

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

const validXR = `
apiVersion: example.com/v1
kind: Database
metadata: {name: orders, namespace: shop}
spec: {version: "16", size: medium}
`

// TestBadInput: every malformed request gets one Fatal result whose message
// names the field and what is allowed, and no desired composed resources (a
// Fatal response is never applied, so nothing existing is touched).
func TestBadInput(t *testing.T) {
	xr := func(spec string) string {
		return "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\nspec: " + spec
	}
	input := func(in string) string {
		return "apiVersion: database.fn.example.com/v1beta1\nkind: Input\n" + in
	}
	cases := map[string]struct {
		reason string
		xr     string // empty: no observed XR at all
		input  string
		want   []string // every fragment must be in the Fatal message
	}{
		"NoXR":               {reason: "a request without an observed XR", want: []string{"no observed composite resource"}},
		"NoSpec":             {reason: "an XR without spec", xr: "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: shop}\n", want: []string{"spec: Required value", "spec.version and spec.size"}},
		"EmptySpec":          {reason: "an empty spec", xr: xr("{}"), want: []string{"spec.version: Required value", "spec.size: Required value"}},
		"VersionNumber":      {reason: "version as a number", xr: xr(`{version: 16, size: small}`), want: []string{"spec.version", "must be a string"}},
		"VersionMalformed":   {reason: "a version that is no version", xr: xr(`{version: "sixteen", size: small}`), want: []string{"spec.version", `"16" or "16.4"`}},
		"VersionPatch":       {reason: "three version parts", xr: xr(`{version: "16.4.1", size: small}`), want: []string{"spec.version", "major.minor"}},
		"VersionLatest":      {reason: "a floating version", xr: xr(`{version: "latest", size: small}`), want: []string{"spec.version"}},
		"VersionTooOld":      {reason: "an unsupported major", xr: xr(`{version: "13", size: small}`), want: []string{"spec.version", `supported values: "14", "15", "16", "17", "18"`}},
		"VersionTooNew":      {reason: "a future major", xr: xr(`{version: "19.1", size: small}`), want: []string{"spec.version", "PostgreSQL 19 does not exist yet", "supported majors: 15, 16, 17, 18"}},
		"VersionNoMinor":     {reason: "issue 12: a minor that cannot exist", xr: xr(`{version: "16.99", size: small}`), want: []string{"spec.version", "PostgreSQL 16 has no minor 99"}},
		"KeyCase":            {reason: "a key that differs from a field only in case", xr: xr(`{Version: "16", size: small}`), want: []string{"spec.Version", `did you mean "version"`}},
		"NestedKeyCase":      {reason: "a nested key in the wrong case", xr: xr(`{version: "16", size: small, backup: {enabled: true, Schedule: "0 2 * * *"}}`), want: []string{"spec.backup.Schedule", `did you mean "schedule"`}},
		"SizeUnknown":        {reason: "an unknown tier", xr: xr(`{version: "16", size: huge}`), want: []string{"spec.size", `supported values: "small", "medium", "large"`}},
		"SizeWrongType":      {reason: "size as an object", xr: xr(`{version: "16", size: {tier: small}}`), want: []string{"spec.size", "must be a string"}},
		"BadCron":            {reason: "a schedule that is not cron", xr: xr(`{version: "16", size: small, backup: {enabled: true, schedule: "every night"}}`), want: []string{"spec.backup.schedule", "5-field cron"}},
		"CronSixFields":      {reason: "a seconds field", xr: xr(`{version: "16", size: small, backup: {enabled: true, schedule: "0 0 2 * * *"}}`), want: []string{"spec.backup.schedule"}},
		"CronTimeZone":       {reason: "a time zone in the schedule", xr: xr(`{version: "16", size: small, backup: {enabled: true, schedule: "CRON_TZ=UTC 0 2 * * *"}}`), want: []string{"spec.backup.schedule", "time zone"}},
		"CronEvery":          {reason: "@every is not a CronJob schedule", xr: xr(`{version: "16", size: small, backup: {enabled: true, schedule: "@every 1h"}}`), want: []string{"spec.backup.schedule", "@every"}},
		"BackupSpellings":    {reason: "issue 16: both spellings of backup.enabled, different values", xr: xr(`{version: "16", size: small, backup_enabled: true, backup: {enabled: false}}`), want: []string{"spec.backup_enabled", "differs from spec.backup.enabled"}},
		"NegativeRetention":  {reason: "negative retention", xr: xr(`{version: "16", size: small, backup: {enabled: true, retention: -1}}`), want: []string{"spec.backup.retention", "between 1 and 1000"}},
		"ZeroRetention":      {reason: "retention zero would prune every backup", xr: xr(`{version: "16", size: small, backup: {retention: 0}}`), want: []string{"spec.backup.retention"}},
		"FractionRetention":  {reason: "retention 2.5", xr: xr(`{version: "16", size: small, backup: {retention: 2.5}}`), want: []string{"spec.backup.retention", "must be an integer"}},
		"EnabledString":      {reason: `enabled: "yes"`, xr: xr(`{version: "16", size: small, backup: {enabled: "yes"}}`), want: []string{"spec.backup.enabled", "boolean"}},
		"BadStorageSize":     {reason: "a quantity that does not parse", xr: xr(`{version: "16", size: small, storage: {size: "20 gigs"}}`), want: []string{"spec.storage.size", "quantity"}},
		"TinyStorage":        {reason: "half a byte", xr: xr(`{version: "16", size: small, storage: {size: "0.5"}}`), want: []string{"spec.storage.size", "at least 1Gi"}},
		"SmallStorage":       {reason: "a volume the WAL would fill", xr: xr(`{version: "16", size: small, storage: {size: "500Mi"}}`), want: []string{"spec.storage.size", "at least 1Gi"}},
		"SmallBackupVolume":  {reason: "a backup volume under the minimum", xr: xr(`{version: "16", size: small, backup: {storage: "100M"}}`), want: []string{"spec.backup.storage", "at least 1Gi"}},
		"InputSmallStorage":  {reason: "a tier with a tiny volume", xr: validXR, input: input("tiers: {medium: {storage: 1Mi}}\n"), want: []string{"input.tiers[medium].storage", "at least 1Gi"}},
		"ZeroStorage":        {reason: "an empty volume", xr: xr(`{version: "16", size: small, storage: {size: "0"}}`), want: []string{"spec.storage.size", "greater than zero"}},
		"NegativeStorage":    {reason: "a negative volume", xr: xr(`{version: "16", size: small, storage: {size: "-5Gi"}}`), want: []string{"spec.storage.size", "greater than zero"}},
		"HugeExponent":       {reason: "a quantity ParseQuantity would take minutes on (found by fuzzing)", xr: xr(`{version: "16", size: small, storage: {size: "1e-999999999"}}`), want: []string{"spec.storage.size", "quantity"}},
		"NoName":             {reason: "an XR without a name", xr: "apiVersion: example.com/v1\nkind: Database\nmetadata: {namespace: shop}\nspec: {version: \"16\", size: small}", want: []string{"metadata.name: Required value"}},
		"BadNamespace":       {reason: "a namespace that is no DNS label (found by fuzzing)", xr: "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders, namespace: Shop}\nspec: {version: \"16\", size: small}", want: []string{"metadata.namespace", "RFC 1123"}},
		"BadClaimNamespace":  {reason: "a legacy XR whose claim namespace is no DNS label", xr: "apiVersion: legacy.example.com/v1\nkind: XDatabase\nmetadata: {name: x-abcde, labels: {crossplane.io/claim-name: orders, crossplane.io/claim-namespace: \"-x\"}}\nspec: {version: \"16\", size: small}", want: []string{"metadata.labels[crossplane.io/claim-namespace]"}},
		"BadBackupStorage":   {reason: "a backup volume that does not parse", xr: xr(`{version: "16", size: small, backup: {storage: "lots"}}`), want: []string{"spec.backup.storage"}},
		"BadStorageClass":    {reason: "an invalid class name", xr: xr(`{version: "16", size: small, storage: {storageClassName: "Fast_SSD"}}`), want: []string{"spec.storage.storageClassName"}},
		"BadDeletionPolicy":  {reason: "an unknown deletion policy", xr: xr(`{version: "16", size: small, deletionPolicy: Orphan}`), want: []string{"spec.deletionPolicy", `"Retain", "Delete"`}},
		"RestoreNoSource":    {reason: "restoreFrom without a database", xr: xr(`{version: "16", size: small, restoreFrom: {backup: latest}}`), want: []string{"spec.restoreFrom.database: Required value"}},
		"RestoreFromSelf":    {reason: "restoring its own backups", xr: xr(`{version: "16", size: small, restoreFrom: {database: orders}}`), want: []string{"spec.restoreFrom.database", "another Database"}},
		"RestoreBadFile":     {reason: "a path in the backup name", xr: xr(`{version: "16", size: small, restoreFrom: {database: old, backup: "../../etc/passwd"}}`), want: []string{"spec.restoreFrom.backup"}},
		"RestoreBadAttempt":  {reason: "a negative attempt", xr: xr(`{version: "16", size: small, restoreFrom: {database: old, attempt: -1}}`), want: []string{"spec.restoreFrom.attempt", "raise it by one"}},
		"RestoreAttemptType": {reason: "an attempt that is not an integer", xr: xr(`{version: "16", size: small, restoreFrom: {database: old, attempt: "1"}}`), want: []string{"spec.restoreFrom.attempt", "an integer"}},
		"NameTooLong": {reason: "a name over 45 characters",
			xr:   "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: " + strings.Repeat("a", 46) + ", namespace: shop}\nspec: {version: \"16\", size: small}",
			want: []string{"metadata.name", "may not be more than 45"}},
		"NameUppercase": {reason: "a name that is no DNS label", xr: "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: 9orders, namespace: shop}\nspec: {version: \"16\", size: small}",
			want: []string{"metadata.name", "starting with a letter"}},
		"NoNamespace": {reason: "an XR in no namespace and without claim labels", xr: "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: orders}\nspec: {version: \"16\", size: small}",
			want: []string{"metadata.namespace: Required value", "claim"}},
		"LegacyClaimNameTooLong": {reason: "a legacy XR whose claim name is too long",
			xr:   "apiVersion: legacy.example.com/v1\nkind: XDatabase\nmetadata: {name: x-abcde, labels: {crossplane.io/claim-name: " + strings.Repeat("b", 50) + ", crossplane.io/claim-namespace: shop}}\nspec: {version: \"16\", size: small}",
			want: []string{"metadata.labels[crossplane.io/claim-name]", "45"}},
		"InputUnknownField": {reason: "a typo in the input", xr: validXR, input: input("imag: postgres\n"), want: []string{"input", `unknown field "imag"`}},
		"InputWrongKind":    {reason: "input of another function", xr: validXR, input: "apiVersion: template.fn.crossplane.io/v1beta1\nkind: Input\n", want: []string{"input.apiVersion", "database.fn.example.com/v1beta1"}},
		"InputBadTier":      {reason: "an unknown tier in the input", xr: validXR, input: input("tiers: {xlarge: {replicas: 5}}\n"), want: []string{"input.tiers[xlarge]", "Unsupported value"}},
		"InputBadUpdates":   {reason: "an unknown update policy", xr: validXR, input: input("updates: {policy: Never}\n"), want: []string{"input.updates.policy", "Supervised", "Deferred"}},
		"InputBadReplicas":  {reason: "zero replicas", xr: validXR, input: input("tiers: {small: {replicas: 0}}\n"), want: []string{"input.tiers[small].replicas", "between 1 and 9"}},
		"InputBadMemory":    {reason: "a memory that does not parse", xr: validXR, input: input("tiers: {medium: {memory: 1GB RAM}}\n"), want: []string{"input.tiers[medium].memory", "quantity"}},
		"InputBadSetting":   {reason: "a setting that would inject configuration", xr: validXR, input: input("tiers: {medium: {settings: {work_mem: \"4MB'\\nlisten_addresses = '*\"}}}\n"), want: []string{"input.tiers[medium].settings[work_mem]", "single-line"}},
		"InputProtected":    {reason: "overriding a replication setting", xr: validXR, input: input("tiers: {medium: {settings: {wal_level: minimal}}}\n"), want: []string{"input.tiers[medium].settings[wal_level]", "managed by function-database"}},
		"InputImageWithTag": {reason: "a floating image tag in the input", xr: validXR, input: input("image: postgres:latest\n"), want: []string{"input.image", "without tag"}},
		"InputImagesNoTag":  {reason: "an images entry that floats", xr: validXR, input: input("images: {\"16\": registry.example.com/pg}\n"), want: []string{"input.images[16]", "must pin a tag or a digest"}},
		"InputImagesMajor":  {reason: "an images entry of another major", xr: validXR, input: input("images: {\"16\": \"postgres:17.1\"}\n"), want: []string{"input.images[16]", "PostgreSQL 17, not 16"}},
		"InputImagesKey":    {reason: "an images key that is no version", xr: validXR, input: input("images: {latest: \"postgres:16\"}\n"), want: []string{"input.images[latest]", "major.minor"}},
		"InputBadNamespace": {reason: "an allowed namespace that is no name", xr: validXR, input: input("networkPolicy: {allowedNamespaces: [Monitoring]}\n"), want: []string{"input.networkPolicy.allowedNamespaces[0]"}},
		"InputWrongType":    {reason: "replicas as a string", xr: validXR, input: input("tiers: {small: {replicas: one}}\n"), want: []string{"input", "cannot decode"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{}}
			if tc.xr != "" {
				req.Observed.Composite = &fnv1.Resource{Resource: yamlStruct(t, tc.xr)}
			}
			if tc.input != "" {
				req.Input = yamlStruct(t, tc.input)
			}
			rsp := runTest(t, req)
			assertFatal(t, tc.reason, rsp, tc.want...)
		})
	}
}

func assertFatal(t *testing.T, reason string, rsp *fnv1.RunFunctionResponse, want ...string) {
	t.Helper()
	rs := rsp.GetResults()
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("%s: want one Fatal result, got %v", reason, rs)
	}
	for _, w := range want {
		if !strings.Contains(rs[0].GetMessage(), w) {
			t.Errorf("%s: Fatal message %q does not contain %q", reason, rs[0].GetMessage(), w)
		}
	}
	if n := len(rsp.GetDesired().GetResources()); n != 0 {
		t.Errorf("%s: a Fatal response carries %d desired resources, want none", reason, n)
	}
}
