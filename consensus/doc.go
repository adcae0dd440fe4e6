// Package consensus is Concord's claim-level consensus engine: a multi-agent
// debate (initial round, debate rounds, final vote) that reproduces the
// observable behaviour of argue v0.5.0 as specified in
// shared/design/consensus-engine.md.
//
// The engine is a pure reducer. NewState(start) creates a run; s.Apply(input)
// applies every later input to s in place and returns the effects (dispatch
// a task, set or clear a timer, cancel a task, emit an event, finish). Apply
// mutates because copying a run's state per input would make each step cost
// O(state); Clone gives a caller the old value. Inputs carry their own time
// and ids; the reducer reads no clock, draws no random numbers, does no I/O
// and never depends on map iteration order, so every Raft replica that
// applies the same inputs holds a byte-identical state. EncodeState and
// DecodeState move a state through Raft snapshots in a versioned binary
// format.
//
// Agent output is untrusted: results arrive as raw JSON and are validated
// against the phase's schema; anything malformed becomes a failed task and
// eliminates its sender, never a panic. A round result can be parsed once
// where it arrives (ParseRoundResult: every check that does not depend on
// the task) and carried to Apply in a compact binary form (MarshalBinary,
// DecodeRoundResult); Apply then only binds it to its task, with the same
// outcome and error text as for the raw JSON.
//
// Beside the reducer the package offers ParseRequest (request validation
// with field-level errors for a MAP server's -32602 answers), the result
// writers to an io.Writer (events.jsonl, result.json, summary.md) and a
// deterministic simulation kit: Simulate, a virtual-clock driver, with
// scripted agents (Script, Persona) used by tests, benchmarks and demos.
// Everything that reads a clock, starts goroutines, logs or writes files
// (the wall-clock driver, WriteArtifacts) is in consensus/local;
// .ci/depcheck.sh enforces the split.
//
// The package imports no other package of this repository. node's consensus
// driver calls NewState and Apply from the FSM and performs the effects on
// the leader. See DESIGN.md for the decisions and every deviation from the
// spec.
package consensus
