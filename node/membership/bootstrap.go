package membership

import (
	"context"
	"slices"
	"time"
)

// WaitBootstrapExpect blocks until BootstrapExpect alive servers of this
// system (counting only those configured with the same BootstrapExpect)
// are known and the chosen set has been stable for Timings.BootstrapSettle,
// then returns that set: the first BootstrapExpect of them by node id. Every
// node started with the same peers computes the same set, whatever the
// start order, so each may call raft's BootstrapCluster with it; see
// doc.go for why that is safe. It returns ctx's error, ErrNotStarted,
// ErrShutdown, ErrLeft, or ErrBootstrapDisabled when BootstrapExpect is 0.
func (m *Membership) WaitBootstrapExpect(ctx context.Context) ([]Member, error) {
	if m.cfg.BootstrapExpect == 0 {
		return nil, ErrBootstrapDisabled
	}
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	if st == stateNew {
		return nil, ErrNotStarted
	}
	sub := m.Subscribe()
	defer sub.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()

	var chosen []Member
	var since time.Time
	warned := make(map[string]bool)
	for {
		if m.leaving.Load() {
			return nil, ErrLeft
		}
		sub.Drain()
		next := m.bootstrapCandidates(warned)
		now := time.Now()
		if !slices.Equal(next, chosen) {
			chosen, since = next, now
		}
		if len(chosen) == m.cfg.BootstrapExpect {
			wait := m.cfg.Timings.BootstrapSettle - now.Sub(since)
			if wait <= 0 {
				m.log.Info("bootstrap set stable", "servers", memberIDs(chosen))
				return chosen, nil
			}
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case _, ok := <-sub.Changed():
			if !ok {
				return nil, ErrShutdown
			}
		case <-timer.C:
		}
	}
}

// bootstrapCandidates returns up to BootstrapExpect alive servers with a
// matching BootstrapExpect, lowest ids first. A mismatch is an operator
// error; it is logged once per member per wait.
func (m *Membership) bootstrapCandidates(warned map[string]bool) []Member {
	var out []Member
	for _, mem := range m.Members() {
		if mem.Status != StatusAlive || mem.Role != RoleServer {
			continue
		}
		if mem.BootstrapExpect != m.cfg.BootstrapExpect {
			if !warned[mem.ID] {
				warned[mem.ID] = true
				m.log.Warn("peer has a different bootstrap-expect, not counted",
					"peer", mem.ID, "peer_expect", mem.BootstrapExpect, "expect", m.cfg.BootstrapExpect)
			}
			continue
		}
		out = append(out, mem)
		if len(out) == m.cfg.BootstrapExpect {
			break
		}
	}
	return out
}

func memberIDs(ms []Member) []string {
	ids := make([]string, len(ms))
	for i, mem := range ms {
		ids[i] = mem.ID
	}
	return ids
}
