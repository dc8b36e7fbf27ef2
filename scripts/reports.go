package scripts

import (
	"bytes"
	"encoding/json"
)

// The reports: what a script that ends with a result writes as one JSON line
// to its TERMINATION_LOG, which the kubelet keeps in the pod's status and the
// function reads back through Crossplane's required resources. Both sides
// decode them with these types: the function (failover.go, drill.go,
// archive.go), and the scripts' tests, strictly (DecodeReport refuses a key
// the type lacks), so a key renamed on either side fails a test.

// FailoverOutcome is failover.sh's outcome: promoted, found (a standby was
// promoted already), not-needed, or held (no promotion now, and why).
type FailoverOutcome struct {
	Result   string `json:"result"`
	From     int    `json:"from"`
	To       int    `json:"to"`
	Timeline int64  `json:"timeline"`
	LSN      string `json:"lsn"`
	Reason   string `json:"reason"`
}

// DrillVerdict is drill.sh's verdict on the newest backup.
type DrillVerdict struct {
	Result          string  `json:"result"`
	Backup          string  `json:"backup"`
	RestoredTo      string  `json:"restoredTo"`
	RestoreSeconds  float64 `json:"restoreSeconds"`
	RecoverySeconds float64 `json:"recoverySeconds"`
	Seconds         float64 `json:"seconds"`
	Tables          int64   `json:"tables"`
	Rows            int64   `json:"rows"`
	Checksum        string  `json:"checksum"`
	Reason          string  `json:"reason"`
}

// drill.sh's results.
const (
	DrillVerified = "verified"
	DrillFailed   = "failed"
	DrillNoBackup = "nobackup"
)

// RestoreReport is what the first primary restored from an archive reached
// (entrypoint.sh restore_primary), written once before it exits.
type RestoreReport struct {
	Result     string `json:"result"`
	Source     string `json:"source"`
	RestoredTo string `json:"restoredTo"`
	LSN        string `json:"lsn"`
	Timeline   int64  `json:"timeline"`
	// StoppedIn is the WAL segment the replay ended in; ArchiveEnd the
	// last segment the archive held when a restore to its end began
	// (empty with a target time). StoppedIn before ArchiveEnd is a gap.
	StoppedIn  string  `json:"stoppedIn,omitempty"`
	ArchiveEnd string  `json:"archiveEnd,omitempty"`
	Seconds    float64 `json:"seconds"`
}

// Gap: the replay of a restore to the archive's end stopped in a segment
// before the last one the archive held, so one in between is missing. The
// log and segment numbers are compared (the last 16 of 24 hex digits),
// whatever the timelines.
func (r RestoreReport) Gap() bool {
	return len(r.StoppedIn) == 24 && len(r.ArchiveEnd) == 24 && r.StoppedIn[8:] < r.ArchiveEnd[8:]
}

// Restored is RestoreReport's one result.
const Restored = "restored"

// DecodeReport decodes one report strictly: a key T does not have is an
// error, as is trailing text.
func DecodeReport[T any](b []byte) (T, error) {
	var v T
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return v, err
	}
	if d.More() {
		return v, &json.SyntaxError{Offset: d.InputOffset()}
	}
	return v, nil
}
