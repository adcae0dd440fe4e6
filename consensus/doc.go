// Package consensus is Concord's claim-level consensus engine: a multi-agent
// debate (initial round, debate rounds, final vote) that reproduces the
// observable behaviour of argue v0.5.0 as specified in
// shared/design/consensus-engine.md.
//
// The engine is a pure reducer. Step(state, input) returns the new state and
// a list of effects (dispatch a task, set or clear a timer, cancel a task,
// emit an event, finish). Inputs carry their own time and ids; the reducer
// reads no clock, draws no random numbers, does no I/O and never depends on
// map iteration order, so every Raft replica that applies the same inputs
// holds a byte-identical state. EncodeState and DecodeState move a state
// through Raft snapshots in a versioned binary format.
//
// Agent output is untrusted: results arrive as raw JSON and are validated
// against the phase's schema; anything malformed becomes a failed task and
// eliminates its sender, never a panic. A round result can be parsed once
// where it arrives (ParseRoundResult: every check that does not depend on
// the task) and carried to Step in a compact binary form (MarshalBinary,
// DecodeRoundResult); Step then only binds it to its task, with the same
// outcome and error text as for the raw JSON.
//
// Outside the reducer the package offers ParseRequest (request validation
// with field-level errors for a MAP server's -32602 answers), the artifact
// writers (events.jsonl, result.json, summary.md), and RunLocal, an
// in-process driver with scripted agents (Script, Persona) used by tests and
// by `concord argue run --local`.
//
// The package imports no other package of this repository. node's consensus
// driver calls Step from the FSM and performs the effects on the leader.
// See DESIGN.md for the decisions and every deviation from the spec.
package consensus
