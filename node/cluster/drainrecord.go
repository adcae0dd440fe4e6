package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// Drain admissions in replicated state (registry apply_drain.go). The
// leader records each drain it admits with DRAIN_ADMIT, carrying the
// expiry (its clock plus the drain's budget), its term and the index of
// the last admission it decided from; every later leader reads them from
// its replica. The reconciler releases (DRAIN_RELEASE) an admission whose
// node left the Raft configuration (its drain finished) or that expired.
// Expiry is judged by the reader's clock, so leaders' clocks must agree to
// well within a drain's budget (minutes).

// DrainLedger is the drain admissions recorded in replicated state.
// Implemented by *registry.State.
type DrainLedger interface {
	// DrainAdmissions returns the recorded admissions and the index of
	// the last DRAIN_ADMIT applied, which the next one quotes.
	DrainAdmissions() ([]registry.DrainAdmission, uint64)
}

// drainsReplicated reports whether admissions may be proposed: every
// configured server advertises (floor), and replicated state records, at
// least FSMLevelDrainAdmissions, so no replica would panic on the command
// type. Below it the leader keeps admissions in memory (drainLeases).
func (r *Reconciler) drainsReplicated(floor int) bool {
	if r.deps.Drains == nil || r.deps.Levels == nil {
		return false
	}
	return registry.GateLevel(floor, r.deps.Levels.SystemFSMLevel()) >= registry.FSMLevelDrainAdmissions
}

// configuredFloor is the lowest FSM level the servers of the configuration
// advertise in gossip (one gossip does not know counts as 0).
func configuredFloor(servers []raftstore.Server, members []membership.Member) int {
	level := make(map[string]int, len(members))
	for _, m := range members {
		level[m.ID] = m.FSMLevel
	}
	floor := -1
	for _, s := range servers {
		l, ok := level[s.ID]
		if !ok {
			return 0
		}
		if floor < 0 || l < floor {
			floor = l
		}
	}
	return max(floor, 0)
}

// recordedDrains returns the nodes whose recorded admission still counts
// at now (not expired, node still configured) and the index the next
// admission must quote. Read whatever the level: reading is harmless, and
// an admission recorded once still counts if gossip briefly shows a lower
// level.
func (r *Reconciler) recordedDrains(servers []raftstore.Server, now time.Time) (map[string]bool, uint64) {
	out := map[string]bool{}
	if r.deps.Drains == nil {
		return out, 0
	}
	adm, last := r.deps.Drains.DrainAdmissions()
	configured := make(map[string]bool, len(servers))
	for _, s := range servers {
		configured[s.ID] = true
	}
	for _, a := range adm {
		if configured[a.NodeID] && now.UnixMilli() < a.ExpiresAtMs {
			out[a.NodeID] = true
		}
	}
	return out, last
}

// recordAdmission proposes DRAIN_ADMIT for id until until, decided from
// the admissions as of basedOn. Losing leadership meanwhile is
// ErrNotLeader (the drained node asks the new leader); apply's
// registry.ErrDrainAdmitStale is returned as is.
func (r *Reconciler) recordAdmission(ctx context.Context, id string, until time.Time, basedOn uint64) error {
	now := r.cfg.now()
	term, _ := strconv.ParseUint(r.deps.Store.Stats()["term"], 10, 64) // diagnostic only
	cmd := &concordv1.DrainAdmit{
		Meta:   &concordv1.CommandMeta{TimestampMs: now.UnixMilli(), NodeId: r.cfg.NodeID},
		NodeId: id, LeaderTerm: term, BasedOnIndex: basedOn, ExpiresAtMs: until.UnixMilli(),
	}
	_, _, err := r.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_DRAIN_ADMIT, cmd)
	switch {
	case err == nil, errors.Is(err, registry.ErrDrainAdmitStale):
		return err
	case errors.Is(err, raftstore.ErrNotLeader), errors.Is(err, raftstore.ErrLeadershipLost), errors.Is(err, raftstore.ErrNoLeader):
		return fmt.Errorf("%w: leadership changed while recording the admission of %s's drain: %v", ErrNotLeader, id, err)
	}
	return fmt.Errorf("record the admission of %s's drain in replicated state: %w", id, err)
}

// releaseDrains proposes DRAIN_RELEASE for each recorded admission whose
// node is no longer configured (its drain finished and it left) or that
// expired by this leader's clock. A failure is logged; the next pass
// tries again.
func (r *Reconciler) releaseDrains(ctx context.Context, in planInput) {
	if r.deps.Drains == nil || !r.drainsReplicated(advertisedFloor(in)) {
		return
	}
	adm, _ := r.deps.Drains.DrainAdmissions()
	if len(adm) == 0 {
		return
	}
	configured := make(map[string]bool, len(in.servers))
	for _, s := range in.servers {
		configured[s.ID] = true
	}
	r.drains.mu.Lock() // not while an admission is being decided
	defer r.drains.mu.Unlock()
	for _, a := range adm {
		reason := "expired"
		switch {
		case !configured[a.NodeID]:
			reason = "left the raft configuration"
		case in.now.UnixMilli() < a.ExpiresAtMs:
			continue
		}
		cmd := &concordv1.DrainRelease{Meta: &concordv1.CommandMeta{TimestampMs: in.now.UnixMilli(), NodeId: r.cfg.NodeID},
			NodeId: a.NodeID, AdmittedIndex: a.Index}
		if _, _, err := r.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_DRAIN_RELEASE, cmd); err != nil {
			r.log.Warn("releasing a drain admission failed; the next pass retries", "peer", a.NodeID, "err", err)
			return
		}
		r.log.Info("drain admission released", "peer", a.NodeID, "admitted_at", a.Index, "reason", reason)
	}
}
