package scripts

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/example/function-database/internal/scram"
)

// TestPasswordsNeverReachServer (issue 12 item 5): roles are created and
// rotated with the SCRAM verifiers the function computes, so that no plaintext
// password reaches the server: not its log with every statement-logging
// setting on, not pg_stat_statements (which keeps utility statements' text
// whatever a session sets), during bootstrap, rotation and primary restart.
func TestPasswordsNeverReachServer(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "loud")
	writeFile(t, filepath.Join(c.scripts, "postgresql.conf"), testTier+`log_statement = 'all'
log_min_duration_statement = 0
log_min_error_statement = 'debug5'
log_duration = on
log_connections = on
shared_preload_libraries = 'pg_stat_statements,auto_explain'
auto_explain.log_min_duration = 0
pg_stat_statements.track = 'all'
pg_stat_statements.track_utility = on
`)
	const rotated = `r0t'ated:pw\x$(id)`
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	sidecarRound := func(t *testing.T) string {
		t.Helper()
		out, err := c.script(time.Minute, append(p.env(), "SYNC_ONCE=1"), SyncPasswords)
		if err != nil || !strings.Contains(out, "passwords applied") {
			t.Fatalf("sync-passwords: %v\n%s", err, out)
		}
		return out
	}
	sidecarRound(t)
	c.setSecret(t, "app", "password", rotated)
	sidecarRound(t)
	p.stop(t)
	p.start(t)
	p.waitReady(t, 60*time.Second)
	sidecarRound(t)

	// Every role logs in with its password: the verifiers are right.
	for _, tc := range []struct{ user, password, db, conn string }{
		{c.app, rotated, c.db, ""},
		{c.su, suPassword, "postgres", ""},
		{c.repl, replPassword, "", "replication=true"},
	} {
		conn := "host=127.0.0.1 port=" + itoa(p.port) + " user=" + tc.user
		if tc.db != "" {
			conn += " dbname=" + tc.db
		}
		if tc.conn != "" {
			conn += " " + tc.conn
		}
		sql := "SELECT 1"
		if tc.conn != "" {
			sql = "IDENTIFY_SYSTEM"
		}
		if _, err := c.psqlConn(conn, tc.password, sql); err != nil {
			t.Errorf("%s: %v", tc.user, err)
		}
	}
	c.superSQL(t, p, "postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	statements := c.superSQL(t, p, "postgres", "SELECT string_agg(query, E'\\n') FROM pg_stat_statements")
	if !strings.Contains(statements, "ALTER ROLE") {
		t.Errorf("pg_stat_statements did not see the password statements (test broken?):\n%s", statements)
	}
	logs := p.logs()
	if !strings.Contains(logs, "statement: ") {
		t.Errorf("the server logged no statement (test broken?)")
	}
	for _, pw := range []string{appPassword, rotated, suPassword, replPassword} {
		// As written, as an SQL literal's content (quotes doubled), and as
		// psql's :'var' writes it (PQescapeLiteral: E'...', backslashes
		// doubled too).
		quoted := strings.ReplaceAll(pw, "'", "''")
		for _, form := range []string{pw, quoted, strings.ReplaceAll(quoted, `\`, `\\`)} {
			if strings.Contains(logs, form) {
				t.Errorf("a plaintext password is in the server log")
			}
			if strings.Contains(statements, form) {
				t.Errorf("a plaintext password reached the server (pg_stat_statements)")
			}
		}
	}
	if got := c.superSQL(t, p, "postgres", "SELECT count(*) FROM pg_authid WHERE rolpassword NOT LIKE 'SCRAM-SHA-256$4096:%'"); got != "0" {
		t.Errorf("%s roles without a SCRAM verifier", got)
	}

	// The function's verifier (internal/scram, which the pods apply) is
	// PostgreSQL's own for the same salt, SASLprep included.
	t.Run("same verifier as PostgreSQL", func(t *testing.T) {
		for _, tc := range []struct{ name, password string }{
			{"ascii with quotes", appPassword},
			{"empty-looking spaces", "  "},
			{"latin-1 letters", "pässwörd"},
			{"fullwidth (NFKC)", "ｐａｓｓ１２"},
			{"no-break space (mapped to a space)", "pass\u00a0word"},
			{"soft hyphen (mapped to nothing)", "pass\u00adword"},
			{"not UTF-8 (raw bytes)", "p\xe4ss"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c.superSQL(t, p, "postgres", "DROP ROLE IF EXISTS scram_probe")
				out, err := c.psqlConn("host=127.0.0.1 port="+itoa(p.port)+" user="+c.su+" dbname=postgres", suPassword,
					"SET password_encryption = 'scram-sha-256'; CREATE ROLE scram_probe LOGIN PASSWORD '"+strings.ReplaceAll(tc.password, "'", "''")+"'")
				if err != nil {
					if strings.Contains(out, "invalid byte sequence") {
						t.Skip("the server cannot take this password as text")
					}
					t.Fatal(err)
				}
				want := c.superSQL(t, p, "postgres", "SELECT rolpassword FROM pg_authid WHERE rolname = 'scram_probe'")
				salt := strings.SplitN(strings.SplitN(want, ":", 2)[1], "$", 2)[0]
				raw, err := base64.StdEncoding.DecodeString(salt)
				if err != nil {
					t.Fatalf("salt %q: %v", salt, err)
				}
				if got := scram.Verifier(tc.password, raw, scram.Iterations); got != want {
					t.Errorf("internal/scram verifier\n%s, PostgreSQL's\n%s", got, want)
				}
			})
		}
		c.superSQL(t, p, "postgres", "DROP ROLE IF EXISTS scram_probe")
	})
}

// TestPasswordEditWaitsForVerifier: the pods set passwords only from the
// verifiers the function computes into the superuser Secret. An app
// password edited in the credentials Secret, before the function's
// reconcile wrote its copy and verifier, is not applied (the old one keeps
// working, rather than the role getting the old verifier as the new
// password), and is once they are there; a superuser Secret without
// verifiers (written by a function before them) stops the apply with a
// line saying why, and nothing else.
func TestPasswordEditWaitsForVerifier(t *testing.T) {
	t.Parallel()
	tl := requirePostgres(t)
	root := newRoot(t, tl)
	c := newCluster(t, tl, root, "edit")
	p := c.instance(0)
	p.start(t)
	p.waitReady(t, 120*time.Second)
	round := func(t *testing.T) (string, error) {
		t.Helper()
		return c.script(time.Minute, append(p.env(), "SYNC_ONCE=1"), SyncPasswords)
	}
	if out, err := round(t); err != nil || !strings.Contains(out, "passwords applied") {
		t.Fatalf("first round: %v\n%s", err, out)
	}
	logsIn := func(pw string) bool {
		_, err := c.psql(p.port, c.app, pw, c.db, "SELECT 1")
		return err == nil
	}

	const edited = `edi't:ed\pw`
	c.setSecretFile(t, "app", "password", edited)
	out, err := round(t)
	if err == nil || !strings.Contains(out, "waiting for the function to write its verifier") {
		t.Errorf("a round with the edit but not its verifier: %v, want a failed round waiting for the function\n%s", err, out)
	}
	if !logsIn(appPassword) || logsIn(edited) {
		t.Errorf("before the function's verifier: the old password logs in %v, the edited one %v; want the old one only", logsIn(appPassword), logsIn(edited))
	}

	c.setSecret(t, "app", "password", edited) // the function's reconcile
	if out, err := round(t); err != nil || !strings.Contains(out, "passwords applied") {
		t.Fatalf("a round after the function's verifier: %v\n%s", err, out)
	}
	if logsIn(appPassword) || !logsIn(edited) {
		t.Errorf("after the function's verifier: the old password logs in %v, the edited one %v; want the edited one only", logsIn(appPassword), logsIn(edited))
	}

	// A Secret from before verifiers: the apply stops and says why.
	if err := os.Remove(filepath.Join(c.adminSec, "password-verifier")); err != nil {
		t.Fatal(err)
	}
	out, err = round(t)
	if err == nil || !strings.Contains(out, "no SCRAM verifier in") || strings.Contains(out, "passwords applied") {
		t.Errorf("a round without the superuser's verifier: %v, want a failed round naming it\n%s", err, out)
	}
	if !logsIn(edited) {
		t.Errorf("the app password stopped working without a verifier")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
