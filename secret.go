package main

import (
	"crypto/rand"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/example/function-database/internal/scram"
)

// passwords are the credentials of a Database. Each is read back from the
// observed Secret when it exists and generated only when it does not, so a
// password is never regenerated under a running database.
type passwords struct {
	App, Superuser, Replication string

	// CredentialsVersion and SuperuserVersion are the resourceVersions of
	// the observed Secrets the passwords were read from, and the desired
	// Secrets carry them: the API server then refuses (409 Conflict) to
	// apply a Secret over an edit made after the observation, Crossplane
	// requeues without an event, and the next reconcile reads the edit.
	// Without them a reconcile in flight when a user rotates a password
	// applies what it computed before, which puts the old password back.
	// Empty (no observed Secret) makes the apply unconditional: it creates.
	CredentialsVersion, SuperuserVersion string
}

// passwordAlphabet avoids characters that need escaping in URIs, pgpass
// files and shell, so that every connection string is plain.
const passwordAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

const passwordLength = 32

// newPassword draws a password from crypto/rand: 32 characters of a
// 62-letter alphabet is 190 bits.
func newPassword() string {
	return randomString(passwordLength)
}

func randomString(n int) string {
	b := make([]byte, n)
	max := byte(len(passwordAlphabet))
	// Rejection sampling keeps every letter equally likely.
	limit := 256 - 256%int(max)
	buf := make([]byte, 1)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand.Read never fails on Linux (Go 1.24+ documents it).
		}
		if int(buf[0]) < limit {
			b[i] = passwordAlphabet[buf[0]%max]
			i++
		}
	}
	return string(b)
}

// resolvePasswords takes each password from the observed Secrets, generating
// only those that are missing or empty. The app password is read from the
// credentials Secret (where a user rotates it), else from its copy in the
// superuser Secret, so that the loss of either Secret keeps it. The
// superuser and replication passwords have no copy: when their Secret is
// lost they are generated again, and the password-sync sidecar applies them
// over the socket (peer authentication needs no old password); only the
// pods and jobs use them, and they read them from the Secret.
func resolvePasswords(o *observed, generate func() string) passwords {
	existingOrNew := func(s *corev1.Secret, key string) string {
		if s != nil && len(s.Data[key]) > 0 {
			return string(s.Data[key])
		}
		return generate()
	}
	app := ""
	if o.Credentials != nil {
		app = string(o.Credentials.Data[keyPassword])
	}
	if app == "" {
		app = existingOrNew(o.Superuser, keyAppPasswordCopy)
	}
	return passwords{
		App:                app,
		Superuser:          existingOrNew(o.Superuser, keyPassword),
		Replication:        existingOrNew(o.Superuser, keyReplicationPassword),
		CredentialsVersion: resourceVersion(o.Credentials),
		SuperuserVersion:   resourceVersion(o.Superuser),
	}
}

// resourceVersion is s's, or empty when s was not observed.
func resourceVersion(s *corev1.Secret) string {
	if s == nil {
		return ""
	}
	return s.ResourceVersion
}

// credentialsSecret is what apps mount: everything a client needs to connect
// to the primary as the app role, which owns database N.
func credentialsSecret(db *database, pw passwords) *corev1.Secret {
	host := serviceHost(db, db.Name)
	port := strconv.Itoa(postgresPort)
	uri := url.URL{
		Scheme: "postgresql",
		User:   url.UserPassword(db.SQLName, pw.App),
		Host:   host + ":" + port,
		Path:   "/" + db.SQLName,
	}
	jdbc := fmt.Sprintf("jdbc:postgresql://%s:%s/%s?user=%s&password=%s", host, port, db.SQLName,
		url.QueryEscape(db.SQLName), url.QueryEscape(pw.App))
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            credentialsName(db),
			Namespace:       db.Namespace,
			ResourceVersion: pw.CredentialsVersion,
			Labels:          labels(db, componentDatabase),
			Annotations: map[string]string{
				annotationSQLNames: "role and database " + db.SQLName + " (the Database name with '-' turned into '_')",
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			keyUsername: []byte(db.SQLName),
			keyPassword: []byte(pw.App),
			keyDBName:   []byte(db.SQLName),
			keyHost:     []byte(host),
			keyPort:     []byte(port),
			keyURI:      []byte(uri.String()),
			keyJDBCURI:  []byte(jdbc),
			keyPgpass:   []byte(strings.Join([]string{host, port, db.SQLName, db.SQLName, pgpassEscape(pw.App)}, ":") + "\n"),
		},
	}
}

// verifiers remembers the SCRAM verifiers computed in this process: one
// costs 0.7 ms (4096 rounds of HMAC-SHA-256, which is their point), three
// per reconcile of every Database would be most of a reconcile's time.
var verifiers scram.Memo

// verifier is the SCRAM-SHA-256 verifier of role's password, as PostgreSQL
// computes it (SASLprep included). Its salt depends on the Database and the
// role only (scram.StableSalt), so that the same password always gives the
// same verifier: the response stays the same byte for byte, and a verifier
// changes, which makes the pods apply it, only when its password does.
func verifier(db *database, role, password string) []byte {
	salt := scram.StableSalt(db.Namespace + "/" + db.Name + "/" + role)
	return []byte(verifiers.Verifier(password, salt, scram.Iterations))
}

// superuserSecret holds the superuser and replication credentials, and the
// SCRAM verifiers of the three roles' passwords that the pods set them with
// (computed here rather than in the pods: Crunchy PGO does the same). Apps
// never get it: it is mounted only by the database pods and the backup and
// restore jobs. The app password's verifier sits beside its copy, so that
// the pods apply it only when the copy matches the credentials Secret they
// mount: a password just edited there waits for the reconcile the edit
// triggers, rather than the pods setting a verifier of the old one.
func superuserSecret(db *database, pw passwords) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            superuserName(db),
			Namespace:       db.Namespace,
			ResourceVersion: pw.SuperuserVersion,
			Labels:          labels(db, componentDatabase),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			keyUsername:            []byte(superuser),
			keyPassword:            []byte(pw.Superuser),
			keyReplicationUsername: []byte(replicationUser),
			keyReplicationPassword: []byte(pw.Replication),
			keyAppPasswordCopy:     []byte(pw.App),
			keySuperuserVerifier:   verifier(db, superuser, pw.Superuser),
			keyReplicationVerifier: verifier(db, replicationUser, pw.Replication),
			keyAppVerifier:         verifier(db, db.SQLName, pw.App),
		},
	}
}

// pgpassEscape escapes ':' and '\' as the pgpass format requires; a password
// read back from a Secret a user edited may contain them.
func pgpassEscape(s string) string { return pgpassEscaper.Replace(s) }

var pgpassEscaper = strings.NewReplacer(`\`, `\\`, `:`, `\:`)
