// Package local runs a consensus run in process, outside any cluster: the
// I/O shell around the pure reducer in package consensus, for
// `concord argue run --local`, demos and tests.
//
// Run drives a run either on consensus.Simulate's virtual clock
// (deterministic, agents called one at a time) or, with a Clock, on a real
// clock with every agent called concurrently in its own goroutine, which
// Run cancels and waits for before it returns. WriteArtifacts writes a run's
// result.json, events.jsonl and summary.md to a directory.
//
// Everything that reads a clock, starts goroutines, logs or touches files
// lives here so that .ci/depcheck.sh can hold package consensus to "no I/O,
// no clock, no goroutines".
package local
