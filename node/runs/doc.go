// Package runs replicates consensus runs (the claim-level debate engine of
// package consensus) through Raft and drives them from the leader.
//
// Three parts:
//
//   - Module, the raftstore state module "runs". Every engine input (start,
//     task result, task failure, timer, cancel; and forget) is one committed
//     COMMAND_TYPE_RUN_INPUT entry carrying its own time and ids; Apply feeds
//     it to the engine (consensus.NewState, State.Apply), so every replica
//     holds byte-identical run state.
//     Apply also keeps what the engine does not expose (pending timers, the
//     dispatched tasks and whether each is still outstanding, the event
//     list), derived from the engine's effects, and appends every engine event to
//     the registry's replicated event window as a MAP event
//     "x-concord.run.<Type>" with an id derived from (run id, seq). The
//     snapshot holds every run's consensus.EncodeState plus that
//     bookkeeping.
//   - the driver, run by Service.Run only while this node leads: it sends
//     each dispatched task to its agent as a MAP message from
//     "concord.runs" through the router, retries undeliverable sends with
//     backoff (the agent may reconnect elsewhere) until the engine stops
//     waiting, arms the engine's timers (absolute times from the log) and
//     proposes timer_fired when they are due. A new leader's driver
//     re-sends every outstanding task and re-arms every pending timer.
//   - Service's MAP face: the extension methods x-concord/runs/start, get,
//     list and cancel (mounted through mapsvc.Config.ExtensionMethods) and
//     HandleSend, the endpoint for agents' replies (map/send to
//     "concord.runs", registered with router.RegisterService). A reply to a
//     round task is parsed and schema-checked there, once
//     (consensus.ParseRoundResult), and committed in the engine's compact
//     binary form (RunTaskResult.round_result) instead of the agent's JSON:
//     replicas decode it rather than parse JSON in Apply, and the log entry
//     shrinks. A reply that fails the schema is committed the same way and
//     fails its task in Apply exactly as its JSON would have. Report and
//     action replies are committed as JSON. Upgrades: a node built before
//     round_result existed would apply such an entry as an empty result (a
//     failed task) and diverge, so a cluster must not run such nodes beside
//     newer ones while runs are in progress (there is no feature gate yet).
//
// Refusals write nothing. Inputs the engine would ignore (a duplicate or
// late reply, a reply from the wrong agent, a stale timer, cancel of a
// finished run) are refused by Check against the local replica before
// anything is proposed; Apply runs the same check first, so an input that
// loses a race with another commits as a no-op returning the same error.
// A follower's replica may lag behind what an agent has already seen, so a
// follower waits up to ServiceConfig.LagWait for an unknown run or task to
// appear before refusing it.
//
// The leader also tells an agent when the engine stops waiting for a task
// it was sent (x-concord.run.task_cancelled, best effort), and forgets
// finished runs after ServiceConfig.FinishedRetention or beyond
// MaxFinishedRuns by proposing a RunForget input (retention.go): the log
// names the run, so replicas agree whatever their own settings.
//
// Participants of other systems (federation.md §5, remote.go): a
// participant id "<system>:agent:<id>" names an agent of a linked system.
// Start checks it is in the directory imported from that system (5001
// without a link, 2001 when not imported); the run lives here all the
// same. Its tasks go to {system, agent} through the router's federation
// link and arrive "from" "<home>:agent:concord.runs", which is where the
// agent answers; the link hands that reply to this service
// (router.DeliverService) with Sender.SourceSystem set, and only that
// system's agent may answer for the participant. Retries, re-sends,
// timers and eliminations are the same as for local agents; a link that is
// down queues the task (or the answer) in the link's outage buffer. A task
// refused for the message itself (-32602, larger than a link carries) is
// failed at once with that reason rather than retried until its timer.
//
// What it does not do: run debates without Raft (consensus.Simulate does).
//
// The wire shapes (task message, reply, methods, errors, events) are in
// PROTOCOL.md beside this file. node.Server wires the package: see the
// Service and Module constructors.
package runs
