package main

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"
)

// The one-shot containers (the failover Job's, the drill's, a restored
// primary's first run) report as their termination message, the only way
// out of a pod with no API access: the kubelet keeps it in the pod's status,
// which the function reads through Crossplane's required resources.

// terminationMessage is the termination message of container name in pod:
// of its current state (it ended and was not started again), or with last
// of the state before (it ended and the kubelet started it again).
func terminationMessage(pod *structpb.Struct, name string, last bool) string {
	state := "state"
	if last {
		state = "lastState"
	}
	for _, cs := range structAt(pod, "status").GetFields()["containerStatuses"].GetListValue().GetValues() {
		st := cs.GetStructValue()
		if stringAt(st, "name") == name {
			return stringAt(structAt(st, state, "terminated"), "message")
		}
	}
	return ""
}

// decodeReport is msg decoded as a T, or nil when it is none: empty, not
// JSON of that shape, or not valid by valid (a message a crash or the
// kubelet wrote instead of the script).
func decodeReport[T any](msg string, valid func(*T) bool) *T {
	if msg == "" {
		return nil
	}
	var v T
	if json.Unmarshal([]byte(msg), &v) != nil || !valid(&v) {
		return nil
	}
	return &v
}
