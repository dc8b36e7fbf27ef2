package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTerminationMessage(t *testing.T) {
	pod := yamlStruct(t, `kind: Pod
status:
  containerStatuses:
  - name: sidecar
    state: {terminated: {message: not this one}}
  - name: postgres
    state: {running: {startedAt: "2026-12-02T06:50:12Z"}}
    lastState: {terminated: {exitCode: 0, message: '{"result":"restored"}'}}`)
	cases := []struct {
		name, container string
		last            bool
		want            string
	}{
		{"running again: its current state has none", "postgres", false, ""},
		{"running again: the run before", "postgres", true, `{"result":"restored"}`},
		{"another container's", "sidecar", false, "not this one"},
		{"no such container", "failover", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := terminationMessage(pod, tc.container, tc.last); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if got := terminationMessage(yamlStruct(t, "kind: Pod"), "postgres", true); got != "" {
		t.Errorf("a pod without status: %q", got)
	}
}

func TestDecodeReport(t *testing.T) {
	type report struct {
		Result string `json:"result"`
		N      int    `json:"n"`
	}
	valid := func(r *report) bool { return r.Result != "" }
	cases := []struct {
		name, msg string
		want      *report
	}{
		{"empty", "", nil},
		{"not JSON (the kubelet's or a crash's words)", "Error: OOMKilled", nil},
		{"JSON of another shape", `{"n":"three"}`, nil},
		{"not valid", `{"n":3}`, nil},
		{"a report", `{"result":"verified","n":3}`, &report{"verified", 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, decodeReport(tc.msg, valid)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
