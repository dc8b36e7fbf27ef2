package scripts

import (
	"context"
	"encoding/base64"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/example/function-database/internal/scram"
)

// scramVerifier runs lib.sh's scram_verifier (password on stdin), with salt
// (base64) when not empty.
func (c *cluster) scramVerifier(t *testing.T, password, salt string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := append(c.tl.baseEnv(c.root), "SCRAM_TEST_SALT="+salt)
	cmd := c.tl.command(ctx, c.root, env, c.tl.bashPath, "-c",
		`set -euo pipefail; . "$1"; pw=$(cat); scram_verifier v "$pw"; printf '%s' "$v"`, "scram", filepath.Join(c.scripts, Lib))
	cmd.Stdin = strings.NewReader(password)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scram_verifier: %v\n%s", err, out)
	}
	return string(out)
}

// TestPasswordsNeverReachServer (issue 12 item 5): roles are created and
// rotated with SCRAM verifiers computed by the scripts, so that no plaintext
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

	// The verifier is PostgreSQL's own for the same salt, SASLprep included.
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
				if got := c.scramVerifier(t, tc.password, salt); got != want {
					t.Errorf("verifier\n%s, PostgreSQL's\n%s", got, want)
				}
				// The function's Go package (internal/scram) agrees too.
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
		if a, b := c.scramVerifier(t, "x", ""), c.scramVerifier(t, "x", ""); a == b {
			t.Errorf("two verifiers with the same salt: %s", a)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
