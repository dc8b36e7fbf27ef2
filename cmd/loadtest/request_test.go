package main

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

func TestParseRequest(t *testing.T) {
	cases := []struct {
		name     string
		in       string
		wantTag  string
		wantKind string
		wantObs  int
		wantErr  bool
	}{
		{
			name: "YAML",
			in: `
meta: {tag: t1}
observed:
  composite:
    resource:
      apiVersion: example.com/v1
      kind: Database
      metadata: {name: orders, namespace: shop}
      spec: {version: "16", size: medium}
  resources:
    credentials:
      resource: {apiVersion: v1, kind: Secret}
      connection_details: {password: cGFzcw==}
`,
			wantTag: "t1", wantKind: "Database", wantObs: 1,
		},
		{
			name:    "JSON",
			in:      `{"meta":{"tag":"t2"},"observed":{"composite":{"resource":{"kind":"Database"}}}}`,
			wantTag: "t2", wantKind: "Database",
		},
		{name: "unknown field", in: "observd: {}\n", wantErr: true},
		{name: "not YAML", in: "a: [\n", wantErr: true},
		{name: "wrong type", in: "meta: {tag: [1]}\n", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseRequest([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseRequest() error = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got := req.GetMeta().GetTag(); got != tc.wantTag {
				t.Errorf("tag = %q, want %q", got, tc.wantTag)
			}
			if got := req.GetObserved().GetComposite().GetResource().GetFields()["kind"].GetStringValue(); got != tc.wantKind {
				t.Errorf("kind = %q, want %q", got, tc.wantKind)
			}
			if got := len(req.GetObserved().GetResources()); got != tc.wantObs {
				t.Errorf("observed resources = %d, want %d", got, tc.wantObs)
			}
		})
	}
}

func TestFatalResults(t *testing.T) {
	desired := &fnv1.State{Resources: map[string]*fnv1.Resource{
		"credentials": {Resource: &structpb.Struct{Fields: map[string]*structpb.Value{"kind": structpb.NewStringValue("Secret")}}},
	}}
	cases := []struct {
		name      string
		rsp       *fnv1.RunFunctionResponse
		wantFatal []string
	}{
		{name: "empty", rsp: &fnv1.RunFunctionResponse{}},
		{name: "desired only", rsp: &fnv1.RunFunctionResponse{Desired: desired, Meta: &fnv1.ResponseMeta{Tag: "x"}}},
		{
			name: "normal and warning results are not fatal",
			rsp: &fnv1.RunFunctionResponse{Desired: desired, Results: []*fnv1.Result{
				{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: "ok"},
				{Severity: fnv1.Severity_SEVERITY_WARNING, Message: "hm"},
			}},
		},
		{
			name: "fatal among others, after conditions",
			rsp: &fnv1.RunFunctionResponse{
				Desired:    desired,
				Conditions: []*fnv1.Condition{{Type: "Ready"}},
				Results: []*fnv1.Result{
					{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: "ok"},
					{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "spec.size: unknown tier", Reason: proto.String("BadSpec")},
					{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "second"},
				},
			},
			wantFatal: []string{"spec.size: unknown tier", "second"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.rsp)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fatalResults(b)
			if err != nil {
				t.Fatalf("fatalResults() error = %v", err)
			}
			if len(got) != len(tc.wantFatal) {
				t.Fatalf("fatalResults() = %d results, want %d", len(got), len(tc.wantFatal))
			}
			for i, r := range got {
				if r.GetMessage() != tc.wantFatal[i] || r.GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
					t.Errorf("result %d = %v, want fatal %q", i, r, tc.wantFatal[i])
				}
			}

			// The codec path: what the measured loop sees.
			rsp := &fnv1.RunFunctionResponse{}
			if err := (fastCodec{}).Unmarshal(b, rsp); err != nil {
				t.Fatalf("fastCodec.Unmarshal() error = %v", err)
			}
			if len(rsp.GetResults()) != len(tc.wantFatal) {
				t.Errorf("fastCodec.Unmarshal() results = %d, want %d", len(rsp.GetResults()), len(tc.wantFatal))
			}
		})
	}

	t.Run("truncated input is an error", func(t *testing.T) {
		b, _ := proto.Marshal(&fnv1.RunFunctionResponse{Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "m"}}})
		if _, err := fatalResults(b[:len(b)-1]); err == nil {
			t.Error("fatalResults(truncated) error = nil, want an error")
		}
	})
}

func TestFastCodecMarshal(t *testing.T) {
	req := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "a"}}
	other := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "b"}}
	pre := []byte("pre-encoded")
	c := fastCodec{encoded: map[*fnv1.RunFunctionRequest][]byte{req: pre}}
	cases := []struct {
		name string
		in   any
		want []byte
	}{
		{"known request uses the pre-encoded bytes", req, pre},
		{"other message is marshalled", other, func() []byte { b, _ := proto.Marshal(other); return b }()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(tc.want) {
				t.Errorf("Marshal() = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := c.Marshal(42); err == nil {
		t.Error("Marshal(42) error = nil, want an error")
	}
}
