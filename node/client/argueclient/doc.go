// Package argueclient is the logic of `concord argue`: it builds a run's
// start request from flags and an --input file, runs it in process
// (RunLocal) or on a Concord system through the x-concord runs extension
// (Remote.Run, Watch, and the Runs calls get/list/cancel), renders live
// progress one line per engine event (Progress), and writes the run's
// events.jsonl, result.json and summary.md with the consensus package's
// writers.
//
// # Local runs
//
// RunLocal drives consensus/local's Run with persona agents (or an answers
// script). It uses the engine's virtual clock unless asked for the wall
// clock: personas answer instantly anyway, and the virtual clock makes a
// run deterministic (request, run id and start time fix every byte) and
// immediate; its start time defaults to now so event times read naturally.
// The wall clock runs agents concurrently with real timers, for scripts
// with latencies and timeouts that should be felt.
//
// # Remote runs
//
// Remote.Run subscribes to `x-concord.run.*` events before starting the
// run, so nothing is missed, then follows the run: live events are
// rendered in sequence order (duplicates dropped, out-of-order ones held);
// a gap that lasts PollInterval, an idle PollInterval, a full event buffer
// or a reconnect makes the follower re-read the run's events with
// x-concord/runs/get and render what it had not shown. The connection
// fails over between --server URLs and resumes its session (mapclient).
// When the run is over, get with result and events gives the final data
// for the files. start is not repeated blindly after a connection loss:
// the follower first looks for a run with its request id (see Runs.Start).
// Interrupting a remote run detaches from it; the run continues on the
// system (watch resumes following, cancel stops it).
//
// A finished run returns a nil error; a failed or cancelled one returns
// ErrRunFailed or ErrRunCancelled (wrapped) with its Outcome, so the CLI
// exits non-zero after writing the files.
package argueclient
