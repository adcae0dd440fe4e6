package runs

import (
	"context"
	"encoding/json"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// start serves x-concord/runs/start {request} → {runId, requestId, status}.
// The request is validated and every agent it names must exist (registered
// here, or in the directory imported from its system: checkAgents) before
// anything is proposed; the run id is a fresh ULID.
func (s *Service) start(ctx context.Context, from router.Sender, params json.RawMessage) (any, error) {
	raw, err := decodeStart(params)
	if err != nil {
		return nil, err
	}
	req, err := consensus.ParseRequest(raw)
	if err != nil {
		return nil, toRPC(err)
	}
	if err := s.checkAgents(requestAgents(req)); err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	in := s.input(s.newID(), from.ParticipantID)
	in.Input = &concordv1.RunInput_Start{Start: &concordv1.RunStart{RequestJson: body}}
	a, err := s.propose(ctx, in)
	if err != nil {
		return nil, toRPC(err)
	}
	status := StatusRunning
	if a != nil {
		status = a.Status
	}
	return map[string]any{"runId": in.GetRunId(), "requestId": req.RequestID, "status": status}, nil
}

// requestAgents lists the agents the request names (participants, the
// representative reporter, the actor), in order, each once.
func requestAgents(req *consensus.Request) []string {
	ids := make([]string, 0, len(req.Participants)+2)
	for _, p := range req.Participants {
		ids = append(ids, p.ID)
	}
	if id := req.ReportPolicy.RepresentativeID; id != "" {
		ids = append(ids, id)
	}
	if ap := req.ActionPolicy; ap != nil && ap.ActorID != "" {
		ids = append(ids, ap.ActorID)
	}
	seen := map[string]bool{}
	out := ids[:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// get serves x-concord/runs/get {runId, include?} → {run}.
func (s *Service) get(ctx context.Context, _ router.Sender, params json.RawMessage) (any, error) {
	id, inc, err := decodeGet(params)
	if err != nil {
		return nil, err
	}
	var run Run
	err = s.awaitKnown(ctx, func() error {
		var ok bool
		if run, ok = s.mod.Get(id, inc); !ok {
			return notFound(id)
		}
		return nil
	})
	if err != nil {
		return nil, toRPC(err)
	}
	return map[string]any{"run": run}, nil
}

// list serves x-concord/runs/list {status?, limit?, cursor?} →
// {runs, nextCursor?}, newest first.
func (s *Service) list(_ context.Context, _ router.Sender, params json.RawMessage) (any, error) {
	p, err := decodeList(params, s.cfg.DefaultPageSize, s.cfg.MaxPageSize)
	if err != nil {
		return nil, err
	}
	runs, more := s.mod.List(p.status, p.cursor, p.limit)
	out := map[string]any{"runs": runs}
	if more && len(runs) > 0 {
		out["nextCursor"] = runs[len(runs)-1].RunID
	}
	return out, nil
}

// cancel serves x-concord/runs/cancel {runId, reason?} → {run: summary}.
func (s *Service) cancel(ctx context.Context, from router.Sender, params json.RawMessage) (any, error) {
	id, reason, err := decodeCancel(params)
	if err != nil {
		return nil, err
	}
	in := s.input(id, from.ParticipantID)
	in.Input = &concordv1.RunInput_Cancel{Cancel: &concordv1.RunCancel{Reason: reason}}
	if err := s.awaitKnown(ctx, func() error { return s.mod.Check(in) }); err != nil {
		return nil, toRPC(err)
	}
	if _, err := s.propose(ctx, in); err != nil {
		return nil, toRPC(err)
	}
	run, ok := s.mod.Get(id, Include{})
	if !ok {
		return nil, toRPC(notFound(id))
	}
	return map[string]any{"run": run.Summary}, nil
}
