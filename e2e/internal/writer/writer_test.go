package writer

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/example/function-database/internal/checker"
)

// testdata/psql15.log is the script's log against a PostgreSQL 15 server
// made, in turn, read-only, synchronous with no standby (a write timed out,
// two terminated while their commit waited), stopped (immediate: a write
// lost mid-statement, then refused connections), starting up, and back;
// plus the table's creation, a malformed line and an answer naming another
// id.
func TestParse(t *testing.T) {
	b, err := os.ReadFile("testdata/psql15.log")
	if err != nil {
		t.Fatal(err)
	}
	server := checker.Server{SystemID: "7714440695571328551", Timeline: 1, Addr: "127.0.0.1:55432"}
	want := []struct {
		id      int64
		outcome checker.Outcome
	}{
		{12, checker.Acknowledged},
		{13, checker.Failed},        // read-only
		{14, checker.Failed},        // read-only
		{20, checker.Indeterminate}, // timed out waiting for a standby
		{21, checker.Indeterminate}, // terminated: committed locally
		{22, checker.Indeterminate}, // terminated: committed locally
		{23, checker.Indeterminate}, // immediate shutdown mid-statement
		{24, checker.Failed},        // connection refused
		{35, checker.Failed},        // the database system is starting up
		{39, checker.Acknowledged},
		{40, checker.Indeterminate}, // psql succeeded, the answer names 41
	}
	got := Parse(string(b))
	if len(got) != len(want) {
		t.Fatalf("%d attempts, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		a := got[i]
		if a.ID != w.id || a.Outcome() != w.outcome {
			t.Errorf("attempt %d: id %d %s (%v), want id %d %s", i, a.ID, a.Outcome(), a.Err, w.id, w.outcome)
		}
		if w.outcome == checker.Acknowledged && a.Server != server {
			t.Errorf("attempt %d acknowledged by %s, want %s", a.ID, a.Server, server)
		}
	}
	if s, e := got[0].Start, got[0].End; !s.Equal(time.UnixMilli(1796158206312)) || !e.Equal(time.UnixMilli(1796158206357)) {
		t.Errorf("attempt 12 from %s to %s", s, e)
	}
	if !errors.Is(got[3].Err, checker.ErrIndeterminate) || !strings.Contains(got[3].Err.Error(), "timed out") {
		t.Errorf("attempt 20: %v", got[3].Err)
	}
}

func TestInsertTemplate(t *testing.T) {
	if got, want := strings.ReplaceAll(InsertTemplate(), idPlaceholder, "42"), checker.InsertSQL(42); got != want {
		t.Errorf("InsertTemplate with 42:\n%s\nwant\n%s", got, want)
	}
}

// TestScriptSyntax: bash parses the script.
func TestScriptSyntax(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	if out, err := exec.Command(bash, "-n", "-c", Script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
}
