// Package agentbridge is the engine of `concord agent`: it turns a command
// line program, a persona or an answers script into a MAP agent that takes
// part in replicated consensus runs (node/runs).
//
// The runs service sends each task as a map/message with payload
// {"type":"x-concord.run.task", "runId", "task": <engine task JSON>} and
// meta.correlationId = the task id. The Bridge answers with
// map/send {to:{agent:"concord.runs"}, payload:<result envelope {kind,
// output}>, meta:{isResult:true, correlationId:<task id>}}, or, when the
// task could not be done, with the error payload {"kind":"error",
// "error":"..."} (the runs service records a failed task). A task whose
// run lives in another system (a federated debate) comes from
// "<system>:agent:concord.runs"; its answer goes back over the link to
// {system, agent:"concord.runs"}. It never crashes
// on a task and never leaves one unanswered: handler errors, panics,
// malformed tasks, overload and timeouts all become error payloads.
//
// # Handlers
//
//   - ExecHandler runs `sh -c CMD` per task in its own process group, with
//     the task JSON on stdin (and CONCORD_TASK_ID, CONCORD_RUN_ID,
//     CONCORD_TASK_KIND, CONCORD_PARTICIPANT_ID, CONCORD_PHASE,
//     CONCORD_ROUND in the environment). stdout is capped
//     (MaxOutputBytes: more fails the task instead of growing memory); the
//     answer is found by ExtractJSON, which tolerates prose and ```json
//     fences and takes the last candidate (see its doc). An answer that is
//     not already an envelope is wrapped as {kind: <task kind>, output:
//     <answer>}. Non-zero exit, no JSON, and the deadline passing (the
//     whole process group is SIGKILLed) are errors.
//   - NewPersonaHandler and NewScriptHandler rebuild the consensus.Task
//     from its JSON and answer with consensus.Persona or a consensus.Script,
//     byte-identical to what the in-process engine agents answer.
//
// # Scheduling
//
// Deliver (mapclient's OnMessage hook) never blocks the connection: each
// task gets a goroutine owned by the Bridge that waits for one of
// Config.Concurrency slots. At most Concurrency+QueueLimit tasks are held;
// beyond that a task is answered at once with an "overloaded" error. The
// deadline of a task is now + Config.TaskTimeout (`--task-timeout`; set it
// to the runs' waitingPolicy.perTaskTimeoutMs): node/runs' task messages
// carry no deadline (PROTOCOL.md), and an optional payload.timeoutAt (ms)
// is honoured when earlier, should a server send one. The runs driver re-sends outstanding tasks (leader
// change, delivery retries): a duplicate of a running task is ignored, a
// duplicate of an answered one gets the same answer again (the service
// refuses it with 90002 if it already has it). Replies cut by a connection
// loss are repeated after mapclient reconnects, until ReplyTimeout past the
// task's deadline.
//
// Run stops when its context ends: running tasks are cancelled (commands
// killed) and answered with a "stopping" error, the agent is unregistered.
// Serve wraps Dial + Run + Close for cmd/concord.
package agentbridge
