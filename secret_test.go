package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/example/function-database/internal/scram"
)

func TestCredentialsSecretEscapes(t *testing.T) {
	s := credentialsSecret(testDB(), passwords{App: `p@ss:w\rd/?`})
	want := map[string]string{
		"uri":      "postgresql://orders:p%40ss%3Aw%5Crd%2F%3F@orders.shop.svc.cluster.local:5432/orders",
		"jdbc-uri": "jdbc:postgresql://orders.shop.svc.cluster.local:5432/orders?user=orders&password=p%40ss%3Aw%5Crd%2F%3F",
		"pgpass":   "orders.shop.svc.cluster.local:5432:orders:orders:p@ss\\:w\\\\rd/?\n",
	}
	for k, v := range want {
		if got := string(s.Data[k]); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestPasswordsReadBack(t *testing.T) {
	req := runningRequest(t, validXR)
	cred := decodeInto[corev1.Secret](t, req.Observed.Resources["credentials"].GetResource())
	su := decodeInto[corev1.Secret](t, req.Observed.Resources["superuser"].GetResource())
	cred.Data["password"] = []byte("app-password-the-user-set")
	su.Data["password"] = []byte("super-password-kept")
	su.Data["replication-password"] = []byte("repl-password-kept")
	req.Observed.Resources["credentials"] = encodeObserved(t, cred)
	req.Observed.Resources["superuser"] = encodeObserved(t, su)

	rsp := runTest(t, req)
	gotCred := decodeInto[corev1.Secret](t, rsp.Desired.Resources["credentials"].GetResource())
	gotSU := decodeInto[corev1.Secret](t, rsp.Desired.Resources["superuser"].GetResource())
	want := map[string]string{
		"password": "app-password-the-user-set",
		"uri":      "postgresql://orders:app-password-the-user-set@orders.shop.svc.cluster.local:5432/orders",
		"pgpass":   "orders.shop.svc.cluster.local:5432:orders:orders:app-password-the-user-set\n",
	}
	for k, v := range want {
		if got := string(gotCred.Data[k]); got != v {
			t.Errorf("credentials %s = %q, want %q", k, got, v)
		}
	}
	if string(gotSU.Data["password"]) != "super-password-kept" || string(gotSU.Data["replication-password"]) != "repl-password-kept" {
		t.Errorf("superuser passwords were regenerated: %q", gotSU.Data)
	}
	// The verifiers the pods apply follow the passwords read back.
	for key, pw := range map[string]string{
		"app-password-verifier":         "app-password-the-user-set",
		"password-verifier":             "super-password-kept",
		"replication-password-verifier": "repl-password-kept",
	} {
		if !scram.Verifies(string(gotSU.Data[key]), pw) {
			t.Errorf("superuser %s = %q does not verify %q", key, gotSU.Data[key], pw)
		}
	}
}

// TestSuperuserSecretVerifiers: each role's SCRAM verifier verifies its
// password and no other, differs between roles and Databases with the same
// password (the salt names both), and is the same every time for the same
// password (no churn, and a verifier the pods apply only when its password
// changed).
func TestSuperuserSecretVerifiers(t *testing.T) {
	same := passwords{App: "same", Superuser: "same", Replication: "same"}
	db := testDB()
	data := superuserSecret(db, same).Data
	keys := []string{keySuperuserVerifier, keyReplicationVerifier, keyAppVerifier}
	seen := map[string]string{}
	for _, k := range keys {
		v := string(data[k])
		if !scram.Verifies(v, "same") || scram.Verifies(v, "other") {
			t.Errorf("%s = %q: does not verify its password alone", k, v)
		}
		if other, ok := seen[v]; ok {
			t.Errorf("%s and %s share a verifier (and so a salt)", k, other)
		}
		seen[v] = k
	}
	other := testDB()
	other.Name = "invoices"
	if a, b := data[keyAppVerifier], superuserSecret(other, same).Data[keyAppVerifier]; string(a) == string(b) {
		t.Errorf("two Databases share a verifier for the same password: %s", a)
	}
	if diff := cmp.Diff(data, superuserSecret(db, same).Data); diff != "" {
		t.Errorf("computed again (-first +second):\n%s", diff)
	}
	rotated := same
	rotated.App = "rotated"
	again := superuserSecret(db, rotated).Data
	for _, k := range keys {
		if changed := string(again[k]) != string(data[k]); changed != (k == keyAppVerifier) {
			t.Errorf("the app password rotated: %s changed %v", k, changed)
		}
	}
}

// TestSecretsApplyOverWhatWasRead: the desired Secrets carry the
// resourceVersion of the observed ones the passwords were read from, so the
// API server refuses to apply them over an edit made after the observation
// (a password rotated while a reconcile was in flight) instead of putting the
// old password back; a Secret not observed is created unconditionally.
func TestSecretsApplyOverWhatWasRead(t *testing.T) {
	cred, sup := string(rnCredentials), string(rnSuperuser)
	cases := map[string]struct {
		deleted []string
		want    map[string]string
	}{
		"BothObserved":    {want: map[string]string{cred: "4711", sup: "4712"}},
		"CredentialsGone": {deleted: []string{cred}, want: map[string]string{cred: "", sup: "4712"}},
		"SuperuserGone":   {deleted: []string{sup}, want: map[string]string{cred: "4711", sup: ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, validXR)
			for rn, rv := range map[string]string{cred: "4711", sup: "4712"} {
				s := decodeInto[corev1.Secret](t, req.Observed.Resources[rn].GetResource())
				s.ResourceVersion = rv
				req.Observed.Resources[rn] = encodeObserved(t, s)
			}
			for _, rn := range tc.deleted {
				delete(req.Observed.Resources, rn)
			}
			rsp := runTest(t, req)
			got := map[string]string{}
			for rn := range tc.want {
				got[rn] = decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[rn].GetResource()).ResourceVersion
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("desired Secrets' resourceVersion (-want +got):\n%s", d)
			}
		})
	}
}

// TestPasswordsSurviveSecretLoss: the app password survives the deletion of
// either Secret (its copy in the superuser Secret is read back when the
// credentials Secret is gone, and the copy is written again when the
// superuser Secret is gone); the superuser and replication passwords are
// generated again when their Secret is gone (the sidecar applies them over
// peer authentication), and never copied into the Secret apps mount.
func TestPasswordsSurviveSecretLoss(t *testing.T) {
	const (
		app  = "app-password-kept"
		su   = "super-password-kept"
		repl = "repl-password-kept"
	)
	type pws struct{ App, Copy, Superuser, Replication string }
	cases := map[string]struct {
		reason  string
		deleted []string
		want    pws
	}{
		"NoneDeleted":        {"everything read back", nil, pws{app, app, su, repl}},
		"CredentialsDeleted": {"the app password comes back from its copy", []string{string(rnCredentials)}, pws{app, app, su, repl}},
		"SuperuserDeleted":   {"the app password stays and its copy is written again; the superuser's are new", []string{string(rnSuperuser)}, pws{app, app, "generated-password-01", "generated-password-02"}},
		"BothDeleted":        {"nothing left to read back: every password is new (README Known limits)", []string{string(rnCredentials), string(rnSuperuser)}, pws{"generated-password-01", "generated-password-01", "generated-password-02", "generated-password-03"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := runningRequest(t, validXR)
			cred := decodeInto[corev1.Secret](t, req.Observed.Resources[string(rnCredentials)].GetResource())
			sup := decodeInto[corev1.Secret](t, req.Observed.Resources[string(rnSuperuser)].GetResource())
			cred.Data[keyPassword] = []byte(app)
			sup.Data[keyPassword], sup.Data[keyReplicationPassword], sup.Data[keyAppPasswordCopy] = []byte(su), []byte(repl), []byte(app)
			req.Observed.Resources[string(rnCredentials)] = encodeObserved(t, cred)
			req.Observed.Resources[string(rnSuperuser)] = encodeObserved(t, sup)
			for _, rn := range tc.deleted {
				delete(req.Observed.Resources, rn)
			}
			rsp := runTest(t, req)
			gotCred := decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[string(rnCredentials)].GetResource())
			gotSU := decodeInto[corev1.Secret](t, rsp.GetDesired().GetResources()[string(rnSuperuser)].GetResource())
			got := pws{string(gotCred.Data[keyPassword]), string(gotSU.Data[keyAppPasswordCopy]), string(gotSU.Data[keyPassword]), string(gotSU.Data[keyReplicationPassword])}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s: passwords (-want +got):\n%s", tc.reason, d)
			}
			if uri := string(gotCred.Data[keyURI]); !strings.Contains(uri, ":"+tc.want.App+"@") {
				t.Errorf("%s: uri %q does not carry the app password", tc.reason, uri)
			}
			for k, v := range gotCred.Data {
				if strings.Contains(string(v), got.Superuser) || strings.Contains(string(v), got.Replication) {
					t.Errorf("%s: the credentials Secret apps mount holds a superuser or replication password in %s", tc.reason, k)
				}
			}
			// Fed back as observed, nothing changes (but the readiness of the
			// Secret that was missing, and the resourceVersion it now has).
			req.Observed.Resources = observedFrom(t, rsp, true)
			second := desiredOf(runTest(t, req))
			for _, rn := range tc.deleted {
				delete(second[rn].GetResource().GetFields()["metadata"].GetStructValue().GetFields(), "resourceVersion")
			}
			if d := cmp.Diff(desiredOf(rsp), second, protocmp.Transform(), protocmp.IgnoreFields(&fnv1.Resource{}, "ready")); d != "" {
				t.Errorf("%s: the desired state churns (-first +second):\n%s", tc.reason, d)
			}
		})
	}
}

func TestPasswordsAreStrong(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		p := newPassword()
		if len(p) != passwordLength || strings.Trim(p, passwordAlphabet) != "" {
			t.Fatalf("password %q: want %d characters of the alphabet", p, passwordLength)
		}
		if seen[p] {
			t.Fatalf("password %q drawn twice", p)
		}
		seen[p] = true
	}
}
