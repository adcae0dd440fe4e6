package runs

import (
	"cmp"
	"context"
	"slices"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// maxForgetBatch bounds the runs one reaper pass forgets, so a backlog is
// worked off in bounded steps instead of one long burst of proposals.
const maxForgetBatch = 256

// applyForget removes a finished run (checked by check). Its events stay
// in the registry's event window until they age out like any other.
func (m *Module) applyForget(id string) *Applied {
	r := m.runs[id]
	delete(m.runs, id)
	if i, ok := slices.BinarySearch(m.ids, id); ok {
		m.ids = slices.Delete(m.ids, i, i+1)
	}
	m.wake()
	return &Applied{RunID: r.id, RequestID: r.requestID, Status: r.status()}
}

// expired returns the finished runs to forget at nowMs, oldest first (by
// finish time, then id): those finished at least retention ago, then the
// oldest beyond the newest maxFinished finished runs. retention 0 and
// maxFinished 0 each disable their rule. At most maxForgetBatch ids.
func (m *Module) expired(nowMs int64, retention time.Duration, maxFinished int) []string {
	m.mu.RLock()
	type done struct {
		id string
		at int64
	}
	var finished []done
	for id, r := range m.runs {
		if r.st.Done() {
			finished = append(finished, done{id, r.finishedAt})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(finished, func(a, b done) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id)) })
	n := 0 // finished[:n] are to be forgotten
	if retention > 0 {
		cutoff := nowMs - retention.Milliseconds()
		for n < len(finished) && finished[n].at <= cutoff {
			n++
		}
	}
	if maxFinished > 0 && len(finished)-n > maxFinished {
		n = len(finished) - maxFinished
	}
	out := make([]string, 0, min(n, maxForgetBatch))
	for _, f := range finished[:min(n, maxForgetBatch)] {
		out = append(out, f.id)
	}
	return out
}

// reap is the leader's retention loop: every PruneInterval it proposes a
// RunForget for each expired run. It returns when ctx ends (leadership
// lost or shutdown).
func (s *Service) reap(ctx context.Context) {
	if s.cfg.PruneInterval <= 0 || (s.cfg.FinishedRetention <= 0 && s.cfg.MaxFinishedRuns <= 0) {
		return
	}
	t := time.NewTicker(s.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.reapOnce(ctx)
	}
}

// reapOnce proposes RunForget for the runs expired now; it reports how
// many were forgotten.
func (s *Service) reapOnce(ctx context.Context) int {
	forgotten := 0
	for _, id := range s.mod.expired(s.nowMs(), s.cfg.FinishedRetention, s.cfg.MaxFinishedRuns) {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.ProposeTimeout)
		in := &concordv1.RunInput{RunId: id, TimeMs: s.nowMs(), NodeId: s.cfg.NodeID,
			Input: &concordv1.RunInput_Forget{Forget: &concordv1.RunForget{Reason: "retention"}}}
		_, _, err := s.cfg.Store.Apply(pctx, concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, in)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("forgetting an expired run failed; retrying next pass", "run_id", id, "err", err)
			}
			return forgotten
		}
		forgotten++
	}
	if forgotten > 0 {
		s.log.Info("forgot expired runs", "count", forgotten)
	}
	return forgotten
}
