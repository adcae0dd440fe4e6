package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// Drain admission. A drained voter leaves the Raft configuration, so the
// --min-quorum check of a drain must count every other drain in flight:
// two drains asked at once on two nodes, each deciding from its own view
// before either has advertised draining in gossip, would both see enough
// voters and both leave. The drained node therefore asks the leader, which
// decides the admissions one at a time and counts the ones admitted before
// (for the drain's whole budget) until gossip shows them draining.
//
// Once every server enforces registry.FSMLevelDrainAdmissions (and the
// level is recorded), the leader records each admission in replicated
// state (drainrecord.go): a leader elected between an admission and the
// drained node's gossip update still counts it. Below that level (a
// rolling upgrade) the admissions live in the admitting leader's memory
// only, as before, and a leadership change in that window forgets one.

// DrainAdmitter decides drain admissions. Implemented by *Reconciler.
type DrainAdmitter interface {
	AdmitDrain(ctx context.Context, id string, force bool, lease time.Duration) (votersLeft int, err error)
}

// drainLeases are the drains this leader admitted while admissions could
// not be replicated, by node id, with the time until which each counts as
// leaving. mu also serializes the replicated admissions and releases.
type drainLeases struct {
	mu     sync.Mutex // held across a whole admission: they are decided one at a time
	leases map[string]time.Time
}

// admitStaleAttempts bounds the re-decisions of an admission whose record
// apply refused as decided without an admission applied since (a new
// leader that had not yet applied its predecessor's): the record's own
// apply brings the replica up to date, so the second attempt decides from
// the current set.
const admitStaleAttempts = 3

// AdmitDrain admits, or refuses with ErrDrainRefused, the drain of node
// id: refused when id's leaving, with every drain already admitted
// (recorded in replicated state or in this leader's memory) or advertised
// in gossip, would leave fewer than MinQuorum voters and non-voters to
// promote, unless force (then admitted, logged). The admission is counted
// against later ones for lease, or until id leaves the configuration. Only
// the leader admits (ErrNotLeader otherwise, also when leadership is lost
// while recording it).
func (r *Reconciler) AdmitDrain(ctx context.Context, id string, force bool, lease time.Duration) (int, error) {
	r.drains.mu.Lock()
	defer r.drains.mu.Unlock()
	if !r.leading.Load() {
		return 0, ErrNotLeader
	}
	servers, err := r.deps.Store.Configuration(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: the leader cannot read the raft configuration to count the voters left: %v", ErrDrainRefused, err)
	}
	members := r.deps.Members.Members()
	replicate := r.drainsReplicated(configuredFloor(servers, members))
	for attempt := 1; ; attempt++ {
		if attempt > 1 && !r.leading.Load() {
			return 0, ErrNotLeader
		}
		now := r.cfg.now()
		d := r.decideDrain(servers, members, id, now)
		if d.short && !force {
			return d.left, fmt.Errorf("%w: draining %s would leave %d voters (counting the non-voters that can be promoted and the %d other drains in flight), below --min-quorum %d "+
				"(start another server or wait for the other drains to finish first, or drain with --force to accept one failure fewer tolerated until one joins)",
				ErrDrainRefused, id, d.left, d.others, r.cfg.MinQuorum)
		}
		if replicate {
			err := r.recordAdmission(ctx, id, now.Add(lease), d.basedOn)
			if errors.Is(err, registry.ErrDrainAdmitStale) && attempt < admitStaleAttempts {
				r.log.Info("drain admission decided before an earlier one was applied here: deciding again", "peer", id, "err", err)
				continue
			}
			if err != nil {
				return d.left, err
			}
		} else {
			r.drains.leases[id] = now.Add(lease)
		}
		if d.short {
			r.log.Warn("drain admitted below --min-quorum (forced): the system tolerates one failure fewer until another server joins",
				"peer", id, "voters_left", d.left, "min_quorum", r.cfg.MinQuorum)
		}
		r.log.Info("drain admitted", "peer", id, "voters_left", d.left, "other_drains", d.others, "lease", lease, "replicated", replicate)
		return d.left, nil
	}
}

// drainDecision is DrainFloor's verdict on one drain, with how many other
// drains it counted and the recorded admissions' index it read.
type drainDecision struct {
	left, others int
	short        bool
	basedOn      uint64
}

// decideDrain runs DrainFloor for id's drain against every drain in
// flight other than id's own: gossip's draining, the admissions recorded
// in replicated state and those in this leader's memory. Callers hold
// drains.mu.
func (r *Reconciler) decideDrain(servers []raftstore.Server, members []membership.Member, id string, now time.Time) drainDecision {
	leaving := r.drains.current(servers, now)
	recorded, basedOn := r.recordedDrains(servers, now)
	for n := range recorded {
		leaving[n] = true
	}
	delete(leaving, id) // a repeated admission of one node counts it once
	left, short := DrainFloor(servers, members, leaving, id, r.cfg.MinQuorum)
	return drainDecision{left: left, others: len(leaving), short: short, basedOn: basedOn}
}

// current drops the leases that ran out or whose node is no longer
// configured and returns the set of nodes still leased. Callers hold mu.
func (d *drainLeases) current(servers []raftstore.Server, now time.Time) map[string]bool {
	configured := make(map[string]bool, len(servers))
	for _, s := range servers {
		configured[s.ID] = true
	}
	out := make(map[string]bool, len(d.leases))
	for id, until := range d.leases {
		if !configured[id] || !now.Before(until) {
			delete(d.leases, id)
			continue
		}
		out[id] = true
	}
	return out
}

// DrainFloor decides whether draining target, on top of the nodes in
// leaving (drains admitted but maybe not yet seen in gossip), falls short
// of minQuorum. It counts the voters that stay (alive, not draining, not
// leaving) plus the non-voters the autopilot could promote in the place of
// the voters that leave (same conditions), with target gone: that is left.
// It is short when left is below minQuorum, target's leaving lowers it,
// and a voter is among the leaving (target or another): a voter that
// leaves must be replaced, and a non-voter is refused only when it is a
// spare such a replacement needs.
func DrainFloor(servers []raftstore.Server, members []membership.Member, leaving map[string]bool, target string, minQuorum int) (left int, short bool) {
	usable := make(map[string]bool, len(members)) // alive and not draining, by gossip
	for _, m := range members {
		usable[m.ID] = m.Status == membership.StatusAlive && !m.Draining && !leaving[m.ID]
	}
	voterLeaves := false
	before := 0
	for _, sv := range servers {
		if sv.Voter && (sv.ID == target || !usable[sv.ID]) {
			voterLeaves = true
		}
		if sv.ID == target {
			if usable[sv.ID] {
				before++
			}
			continue
		}
		if usable[sv.ID] {
			left++
		}
	}
	before += left
	return left, voterLeaves && left < minQuorum && left < before
}
