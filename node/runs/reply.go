package runs

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// HandleSend receives an agent's reply to a task: a map/send addressed to
// "concord.runs" that the router hands over on the node that received it
// (router.LocalService). It validates the reply against the local
// replica and proposes task_result (or task_failed for an error answer)
// with this node's clock at receipt. Refusals commit nothing:
//   - 90000 RUN_NOT_FOUND: the run of the task id is unknown;
//   - 90002 RUN_TASK_UNKNOWN: the task is unknown (details.reason
//     unknown_task), already settled (already_settled: a duplicate or late
//     reply), or the run is over (run_finished);
//   - 1003 PERMISSION_DENIED: the sender does not own the task's agent
//     (details.reason wrong_agent when the sender takes part in the run,
//     not_participant otherwise);
//   - -32602 for a malformed reply;
//   - the registry's ErrSessionMoved (MAP: retryable 4000, session_moved)
//     once the sending connection's session moved on, should the reply
//     quote it (origin; the module checks it at apply as well).
//
// Success answers like map/send: {messageId, delivered:["concord.runs"]}.
func (s *Service) HandleSend(ctx context.Context, from router.Sender, params json.RawMessage) (any, error) {
	at := s.nowMs()
	rp, err := decodeReply(params)
	if err != nil {
		return nil, err
	}
	runID := runOfTask(rp.taskID)
	var pid, kind string
	err = s.awaitKnown(ctx, func() error {
		var e error
		pid, kind, e = s.mod.taskOwner(runID, rp.taskID)
		return e
	})
	if err != nil {
		return nil, toRPC(err)
	}
	if err := s.checkSender(from, runID, rp.taskID, pid); err != nil {
		return nil, err
	}
	in := &concordv1.RunInput{RunId: runID, TimeMs: at, NodeId: s.cfg.NodeID, Source: senderID(from)}
	in.OriginSessionId, in.OriginSessionEpoch = s.origin(ctx, from)
	switch {
	case rp.failed:
		in.Input = failedInput(rp.taskID, pid, rp.errMsg)
	case len(rp.payload) > consensus.MaxOutputBytes:
		// The engine would fail it anyway; do not put a huge entry in the log.
		in.Input = failedInput(rp.taskID, pid, "result larger than "+strconv.Itoa(consensus.MaxOutputBytes)+" bytes")
	case kind == string(consensus.TaskRound):
		// Parsed and checked here, once: replicas decode the compact form
		// instead of parsing the JSON, and the log entry shrinks. The kind
		// of a task id never changes, so the local replica's view is safe.
		rr, _ := consensus.ParseRoundResult(rp.payload).MarshalBinary()
		in.Input = &concordv1.RunInput_TaskResult{TaskResult: &concordv1.RunTaskResult{
			TaskId: rp.taskID, ParticipantId: pid, RoundResult: rr}}
	default:
		in.Input = &concordv1.RunInput_TaskResult{TaskResult: &concordv1.RunTaskResult{
			TaskId: rp.taskID, ParticipantId: pid, OutputJson: rp.payload}}
	}
	if _, err := s.propose(ctx, in); err != nil {
		return nil, toRPC(err)
	}
	return map[string]any{"messageId": s.newID(), "delivered": []string{ServiceID}}, nil
}

// origin is the session and attach epoch a reply quotes: the sending
// connection's, so that a reply whose forward was held until after its
// agent's session resumed elsewhere (its client told the outcome is
// unknown) does not settle the task behind the connection now holding the
// session. Nothing for a sender of another system (no local session) or
// while some server does not enforce it.
func (s *Service) origin(ctx context.Context, from router.Sender) (string, uint64) {
	if from.SessionEpoch == 0 || from.SourceSystem != "" || s.cfg.FSMLevel == nil ||
		s.cfg.FSMLevel(ctx) < registry.FSMLevelModuleSessionWrites {
		return "", 0
	}
	return from.SessionID, from.SessionEpoch
}

func failedInput(taskID, pid, msg string) *concordv1.RunInput_TaskFailed {
	return &concordv1.RunInput_TaskFailed{TaskFailed: &concordv1.RunTaskFailed{
		TaskId: taskID, ParticipantId: pid, Kind: string(consensus.FailError), Reason: msg}}
}

// checkSender allows a reply from the task's agent: the sending agent is
// pid, or the sender's session owns pid (a session hosting several
// agents); for a participant of another system, that system's agent over
// the link (ownsRemote).
func (s *Service) checkSender(from router.Sender, runID, taskID, pid string) error {
	switch p := s.locate(pid); {
	case p.system != "":
		if ownsRemote(from, p) {
			return nil
		}
	case from.SourceSystem != "":
		// A remote sender never answers for a local participant.
	case from.AgentID == p.id:
		return nil
	default:
		if a, ok := s.cfg.Agents.Agent(p.id); ok && a.OwnerID != "" && from.SessionID != "" && a.SessionID == from.SessionID {
			return nil
		}
	}
	reason := ReasonNotParticipant
	if s.mod.involves(runID, senderID(from)) {
		reason = ReasonWrongAgent
	}
	return rpc.NewError(rpc.CodePermissionDenied, "Permission denied: the task belongs to another agent").
		WithDetails(map[string]any{"reason": reason, "taskId": taskID, "runId": runID})
}

// senderID is the agent (or, without one, the participant) that sent.
func senderID(from router.Sender) string {
	if from.AgentID != "" {
		return from.AgentID
	}
	return from.ParticipantID
}
