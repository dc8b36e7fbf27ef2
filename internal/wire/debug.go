package wire

import (
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Readable returns m as its receiver sees it: marshaled by Codec and decoded
// into a new message of m's type. Resources that Resource pre-encoded (nil
// GetResource() inside this process) come back as Structs.
func Readable[M proto.Message](m M) (M, error) {
	var zero M
	data, err := Codec{}.Marshal(m)
	if err != nil {
		return zero, err
	}
	defer data.Free()
	out := m.ProtoReflect().New().Interface().(M) //nolint:forcetypeassert // New makes a message of M's type
	if err := proto.Unmarshal(data.Materialize(), out); err != nil {
		return zero, err
	}
	return out, nil
}

// YAML renders m readably, as YAML with sorted keys: Readable's message in
// protobuf's JSON mapping. For golden files, test failures and debug logs.
func YAML(m proto.Message) ([]byte, error) {
	r, err := Readable(m)
	if err != nil {
		return nil, err
	}
	j, err := protojson.Marshal(r)
	if err != nil {
		return nil, err
	}
	return yaml.JSONToYAML(j)
}
