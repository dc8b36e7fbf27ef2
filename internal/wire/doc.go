// Package wire is function-database's protobuf machinery, kept apart from
// the domain (the root package) so that the domain works with typed
// Kubernetes objects only:
//
//   - Resource and Struct encode a typed object as google.protobuf.Struct
//     wire bytes in one reflective walk, following the JSON tags and leaving
//     out what the API server owns or Go's zero values add (encode.go).
//     JSONFields is the per-type field table the walk uses.
//   - Decode reads an observed object into its typed kind by a Projection:
//     the fields the caller reads (Fields), or all but some (Omit, Whole),
//     guarding against quantities that would take minutes to parse
//     (decode.go).
//   - Codec is the gRPC codec: deterministic bytes, pooled buffers
//     (codec.go).
//   - Readable and YAML are the debug decoder: a message as its receiver
//     sees it, pre-encoded resources included, for tests and logs
//     (debug.go).
//
// Resource's pre-encoded bytes ride in a message's unknown fields, so inside
// the process GetResource() of a composed resource is nil: read it through
// Readable.
package wire
