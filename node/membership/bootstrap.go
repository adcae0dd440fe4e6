package membership

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// WaitBootstrapExpect blocks until BootstrapExpect alive servers of this
// system (counting only those configured with the same BootstrapExpect)
// are known and the chosen set has been stable for Timings.BootstrapSettle,
// then returns that set: the first BootstrapExpect of them by node id. Every
// node started with the same peers computes the same set, whatever the
// start order, so each may call raft's BootstrapCluster with it; see
// doc.go for why that is safe.
//
// It returns ErrAlreadyBootstrapped as soon as this node or an alive peer
// advertises Raft state (SetBootstrapped): the cluster exists and this node
// must not bootstrap. Other errors: ctx's, ErrNotStarted, ErrShutdown,
// ErrLeft, and ErrBootstrapDisabled when BootstrapExpect is 0.
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
		if by := m.bootstrappedMember(); by != "" {
			m.log.Info("cluster already bootstrapped, not bootstrapping", "peer", by)
			return nil, ErrAlreadyBootstrapped
		}
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

// bootstrappedMember returns the id of the local node or an alive peer
// that advertises Raft state, or "".
func (m *Membership) bootstrappedMember() string {
	if m.bootstrapped.Load() {
		return m.cfg.NodeID
	}
	for _, mem := range m.Members() {
		if mem.Status == StatusAlive && mem.Bootstrapped {
			return mem.ID
		}
	}
	return ""
}

// SetBootstrapped records that this node has Raft state and advertises it,
// so peers still in WaitBootstrapExpect stand down instead of bootstrapping.
// Call it before Start when Raft starts with existing state, and right after
// a successful BootstrapCluster (or being added to a cluster). It may be
// called more than once. After Start it re-advertises the local meta and
// waits until that went out, for at most ctx's deadline capped at
// LeaveTimeout; a timeout is returned but the flag still spreads by gossip.
func (m *Membership) SetBootstrapped(ctx context.Context) error {
	return m.advertiseFlag(ctx, &m.bootstrapped, "bootstrapped")
}

// advertiseFlag sets flag (once) and, after Start, re-advertises the local
// meta and waits until it went out, for at most ctx's deadline capped at
// LeaveTimeout; a timeout is returned but the flag still spreads by gossip.
func (m *Membership) advertiseFlag(ctx context.Context, flag *atomic.Bool, what string) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if flag.Swap(true) {
		return nil
	}
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	if st != stateStarted || m.leaving.Load() {
		// Before Start the flag goes out with the first alive message;
		// after Leave or Shutdown there is nobody left to tell.
		return nil
	}
	timeout := m.cfg.LeaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	// memberlist treats a zero timeout as "wait forever".
	if err := m.ml.UpdateNode(max(timeout, time.Millisecond)); err != nil {
		return fmt.Errorf("advertise %s: %w", what, err)
	}
	return nil
}

// SetDraining advertises that this node is being drained (concord operator
// drain), so the leader never promotes it to voter and promotes a
// replacement before it leaves. It waits like SetBootstrapped.
func (m *Membership) SetDraining(ctx context.Context) error {
	return m.advertiseFlag(ctx, &m.draining, "draining")
}

func memberIDs(ms []Member) []string {
	ids := make([]string, len(ms))
	for i, mem := range ms {
		ids[i] = mem.ID
	}
	return ids
}
