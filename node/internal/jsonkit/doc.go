// Package jsonkit is the edge's JSON toolkit: the few hand-written JSON
// pieces the MAP hot paths need instead of encoding/json's reflection,
// written once. Callers: node/rpc, node/router, node/fanout, node/runs,
// node/cluster (the relay door check).
//
//   - AppendString / AppendStrings write strings byte for byte as
//     encoding/json does with HTML escaping off (json.Encoder with
//     SetEscapeHTML(false)). One behaviour everywhere at the edge: the rpc
//     layer's reflective encoder writes results that way, MAP is JSON-RPC
//     and never HTML, and escaping < and & would inflate agents' text.
//     FuzzAppendString holds the fast and the slow path to encoding/json
//     for every string.
//   - Members, WithoutMember and Lookup walk JSON objects that are already known
//     to be valid without a full decode: they split an object into its raw
//     members, so callers can pick out a few keys or drop one member
//     without building a map or re-encoding the rest.
//
// The walkers do not validate. The rpc layer has checked every inbound
// frame, and the other inputs (events the registry or the router produced)
// are JSON the node wrote itself, so a second validating pass would only
// cost time. They still never panic: input they cannot walk (trailing
// non-whitespace included) is reported as ErrMalformed (or ok == false),
// because tests and internal callers can hand them anything.
//
// Not here, on purpose:
//   - The params reader (rpc.Params): its whole job is to answer a mistake
//     with a -32602 *rpc.Error, and node/rpc imports this package, so it
//     lives beside rpc.InvalidParams; fanout and runs both use it, with one
//     wording per kind of mistake.
//   - consensus's copy of the string appender (consensus/eventjson.go):
//     consensus may not import node, and there is no shared leaf package
//     below both that the fixed layout allows. Its copy matches
//     encoding/json's default Marshal (HTML escaping on) because the
//     engine's other event payloads are marshalled that way, so one event
//     never mixes two escapings. FuzzConsensusCopy proves the two copies
//     differ in exactly that: consensus's bytes are AppendString's with
//     <, > and & escaped.
package jsonkit
