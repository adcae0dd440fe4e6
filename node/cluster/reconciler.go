package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ReconcilerDeps are the Reconciler's collaborators.
type ReconcilerDeps struct {
	// Store is the local Raft store (required).
	Store RaftConfigurator
	// Members is the gossip membership (required).
	Members MemberLister
	// Sessions is the registry replica; nil disables session detaching.
	Sessions SessionReader
	// MemberChanges, optional, wakes the reconciler on membership changes
	// (a membership.Subscription's Changed channel; the reconciler never
	// drains it). Without it changes are seen every ReconcileInterval.
	MemberChanges <-chan struct{}
	// Resolver, optional, lets the leader ask each server for its Raft
	// stats (the autopilot's health checks, health.go). Without it (and
	// without Stats) gossip's alive status alone counts as healthy.
	Resolver AddrResolver
	// Stats, optional, overrides how the stats are fetched (tests).
	Stats StatusFetcher
	// Levels, optional, is the FSM level recorded in replicated state and
	// the one this build enforces: with it the leader records the level
	// every server advertises (fsmrecord.go) and refuses servers below the
	// recorded one. Implemented by *registry.State.
	Levels LevelRecorder
	// Drains, optional, is the drain admissions in replicated state: with
	// it (and Levels), once the system reaches
	// registry.FSMLevelDrainAdmissions, the leader records the drains it
	// admits there and releases them (drainrecord.go). Without it they
	// live in the leader's memory. Implemented by *registry.State.
	Drains DrainLedger
}

// Reconciler keeps the Raft configuration and the registry in line with
// gossip membership (ARCHITECTURE.md "Membership"). It runs on every node,
// tracking since when each node has been dead, but acts only while the
// local store is the leader: it adds alive servers as voters, removes
// servers that left at once and dead ones after DeadServerCleanupDelay
// (never below MinQuorum voters), never adds back a server an operator
// force-removed while it was alive (until it leaves, dies or rejoins; see
// removedAlive), and proposes SESSION_DETACH for sessions
// still marked connected to a node that died or left. Every step is
// idempotent (AddVoter of a present server, RemoveServer of an absent one,
// and a detach quoting a stale epoch are no-ops), so a new leader simply
// runs the same passes. Sessions of a failed node wait SessionDetachGrace
// first: a live node falsely declared failed under load rejoins sooner.
type Reconciler struct {
	cfg     Config
	log     *slog.Logger
	deps    ReconcilerDeps
	track   *tracker
	removed *removedAlive // force-removed alive servers (reconciler_removed.go)
	health  *healthChecker
	pool    *pool // health checks' connections; nil without a Resolver
	// warned holds the members whose --raft-voters mismatch was logged,
	// so it is logged once per member and value, not every pass.
	warned map[string]int
	// lowLevel holds the members whose low FSM level was logged, with it.
	lowLevel map[string]int
	// drains are the drain admissions this leader keeps in memory
	// (drainadmit.go), and the lock that serializes all of them;
	// leading is whether Run last saw this node lead.
	drains  drainLeases
	leading atomic.Bool
}

// NewReconciler validates its inputs and returns a Reconciler; Run starts it.
func NewReconciler(cfg Config, deps ReconcilerDeps) (*Reconciler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Members == nil {
		return nil, fmt.Errorf("%w: Reconciler needs Store and Members", ErrInvalidConfig)
	}
	log := cfg.logger("cluster.reconciler")
	r := &Reconciler{cfg: cfg, log: log, deps: deps, track: newTracker(), removed: newRemovedAlive(log), warned: map[string]int{}, lowLevel: map[string]int{},
		drains: drainLeases{leases: map[string]time.Time{}}}
	fetch := deps.Stats
	if fetch == nil && deps.Resolver != nil {
		r.pool = newPool(cfg)
		fetch = peerStatus{pool: r.pool, resolver: deps.Resolver, dial: cfg.DialTimeout}
	}
	r.health = newHealthChecker(cfg, fetch)
	return r, nil
}

// Health returns the autopilot's latest report; ok is false unless this
// node leads and has checked its servers since.
func (r *Reconciler) Health() (HealthReport, bool) { return r.health.latest() }

// Run is the reconcile loop. It wakes on leadership changes, membership
// changes and every ReconcileInterval, and returns when ctx ends (ctx's
// error) or the store's leadership channel closes at store shutdown (nil).
// The caller owns the goroutine; stop it before shutting the store down.
func (r *Reconciler) Run(ctx context.Context) error {
	leaderCh, unsubscribe := r.deps.Store.SubscribeLeadership()
	defer unsubscribe()
	defer r.leading.Store(false)
	if r.pool != nil {
		defer func() { _ = r.pool.close() }()
	}
	t := time.NewTicker(r.cfg.ReconcileInterval)
	defer t.Stop()
	changes := r.deps.MemberChanges
	// due fires when a dead node's session detach grace runs out, so its
	// sessions move then, not up to a ReconcileInterval later.
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	leader := false
	for {
		due.Stop()
		if leader {
			if wait := r.pass(ctx); wait > 0 {
				due.Reset(wait)
			}
		} else {
			r.observe(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, ok := <-leaderCh:
			if !ok {
				return nil
			}
			if l != leader {
				r.log.Info("reconciler leadership changed", "leader", l)
			}
			if !l {
				r.health.invalidate()
			}
			leader = l
			r.leading.Store(l)
		case _, ok := <-changes:
			if !ok {
				changes = nil
			}
		case <-t.C:
		case <-due.C:
		}
	}
}

// observe updates the tracker only (followers keep "dead since" times so a
// new leader does not start the cleanup delay from zero).
func (r *Reconciler) observe(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.ReconcileTimeout)
	defer cancel()
	_, _ = r.view(cctx)
}

// view gathers the plan input.
func (r *Reconciler) view(ctx context.Context) (planInput, error) {
	in := planInput{self: r.cfg.NodeID, now: r.cfg.now(), delay: r.cfg.DeadServerCleanupDelay, minQuo: r.cfg.MinQuorum,
		target: r.cfg.RaftVoters, stable: r.cfg.ServerStabilizationTime, grace: r.cfg.SessionDetachGrace}
	servers, err := r.deps.Store.Configuration(ctx)
	if err != nil {
		return in, fmt.Errorf("read raft configuration: %w", err)
	}
	in.servers = servers
	if r.deps.Levels != nil {
		in.recorded = r.deps.Levels.SystemFSMLevel()
	}
	var homes []string
	if r.deps.Sessions != nil {
		homes = r.deps.Sessions.ConnectedHomes()
	}
	extra := make([]string, 0, len(servers)+len(homes))
	for _, s := range servers {
		extra = append(extra, s.ID)
	}
	extra = append(extra, homes...)
	in.members = r.track.update(r.deps.Members.Members(), extra, in.now)
	in.removed = r.removed.update(servers, in.members)
	in.sessions = r.awaySessions(homes, in)
	return in, nil
}

// awaySessions returns the connected sessions of the homes that plan and
// nextDetach may act on: another node that gossip does not report alive.
// The sessions of live homes (nearly all of them) are never copied.
func (r *Reconciler) awaySessions(homes []string, in planInput) []registry.Session {
	var out []registry.Session
	for _, h := range homes {
		if h == in.self {
			continue
		}
		if m, known := in.members[h]; !known || m.status == membership.StatusAlive {
			continue
		}
		out = append(out, r.deps.Sessions.ConnectedSessionsOn(h)...)
	}
	return out
}

// pass runs one reconcile pass as leader; a failed step does not stop the
// others, and the next pass starts over. It returns how long until a
// session detach held back by SessionDetachGrace falls due (0: none).
func (r *Reconciler) pass(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReconcileTimeout)
	defer cancel()
	in, err := r.view(ctx)
	if err != nil {
		r.log.Warn("reconcile skipped", "err", err)
		return 0
	}
	in.health = r.health.check(ctx, in, r.deps.Store.Stats())
	r.warnMismatch(in.members)
	r.warnFSMLevel(in)
	for _, a := range plan(in) {
		if err := r.do(ctx, a, in.now); err != nil {
			// The other steps still run: one server that cannot be added
			// (it failed the identity probe) must not hold up the
			// removal of dead ones or session cleanup.
			r.log.Warn("reconcile step failed", "action", a.kind, "peer", a.id, "session_id", a.session, "err", err)
			continue
		}
	}
	r.recordFSMLevel(ctx, in)
	r.releaseDrains(ctx, in)
	if next := nextDetach(in); !next.IsZero() {
		return next.Sub(in.now)
	}
	return 0
}

func (r *Reconciler) do(ctx context.Context, a action, now time.Time) error {
	switch a.kind {
	case actAddVoter:
		if err := r.deps.Store.AddVoter(ctx, a.id, a.addr); err != nil {
			return fmt.Errorf("add voter: %w", err)
		}
		r.log.Info("raft voter added", "peer", a.id, "addr", a.addr, "reason", a.reason)
	case actAddNonvoter:
		if err := r.deps.Store.AddNonvoter(ctx, a.id, a.addr); err != nil {
			return fmt.Errorf("add non-voter: %w", err)
		}
		r.log.Info("raft non-voter added", "peer", a.id, "addr", a.addr, "reason", a.reason)
	case actDemote:
		if err := r.deps.Store.DemoteVoter(ctx, a.id); err != nil {
			return fmt.Errorf("demote voter: %w", err)
		}
		r.log.Info("raft voter demoted to non-voter", "peer", a.id, "reason", a.reason)
	case actRemove:
		if err := r.deps.Store.RemoveServer(ctx, a.id); err != nil {
			return fmt.Errorf("remove server: %w", err)
		}
		r.log.Info("raft server removed", "peer", a.id, "reason", a.reason)
	case actDetach:
		return r.detach(ctx, a, now)
	}
	return nil
}

// warnMismatch logs, once per member and value, an alive server whose
// --raft-voters differs from this leader's: plan leaves it out of the
// Raft configuration until its operator fixes the flag.
func (r *Reconciler) warnMismatch(members map[string]memberView) {
	if r.cfg.RaftVoters == 0 {
		return
	}
	for id, m := range members {
		if m.raftVoters == 0 || m.raftVoters == r.cfg.RaftVoters || m.status != membership.StatusAlive {
			delete(r.warned, id)
			continue
		}
		if r.warned[id] == m.raftVoters {
			continue
		}
		r.warned[id] = m.raftVoters
		r.log.Error("server refused: --raft-voters differs; every server of a system must use the same value",
			"peer", id, "peer_raft_voters", m.raftVoters, "raft_voters", r.cfg.RaftVoters)
	}
}

// warnFSMLevel logs, once per member and level, an alive server that plan
// leaves out of the configuration because its FSM level is below every
// configured server's (fsmFloor). A configured server on an older build
// is the normal middle of a rolling upgrade and is not logged.
func (r *Reconciler) warnFSMLevel(in planInput) {
	floor := fsmFloor(in)
	configured := make(map[string]bool, len(in.servers))
	for _, s := range in.servers {
		configured[s.ID] = true
	}
	for id, m := range in.members {
		if configured[id] || !m.server || m.status != membership.StatusAlive || m.raftAddr == "" || m.fsmLevel >= floor {
			delete(r.lowLevel, id)
			continue
		}
		if lvl, ok := r.lowLevel[id]; ok && lvl == m.fsmLevel {
			continue
		}
		r.lowLevel[id] = m.fsmLevel
		r.log.Error("server refused: its build enforces an older FSM level than every server of the system; upgrade it (downgrades are not supported)",
			"peer", id, "peer_fsm_level", m.fsmLevel, "system_fsm_level", floor, "peer_version", m.version)
	}
}

// detach proposes SESSION_DETACH for a session of a departed node, quoting
// its current epoch (a resume elsewhere in between makes it a no-op) with
// one event id per event it may produce (participant_disconnected plus one
// per agent), as node/mapsvc does.
func (r *Reconciler) detach(ctx context.Context, a action, now time.Time) error {
	// Epoch first, then the home check: a resume on another node after
	// the check makes the quoted epoch stale, so the detach is a no-op;
	// one before it fails the check. Either way the resumed session stays.
	epoch, ok := r.deps.Sessions.SessionEpoch(a.session)
	if !ok {
		return nil // gone meanwhile
	}
	if s, ok := r.deps.Sessions.Session(a.session); !ok || !s.Connected || s.HomeNode != a.id {
		return nil
	}
	// The pass's view may be old by now (a slow Apply of an earlier
	// session under load): a node wrongly declared failed that rejoined
	// gossip meanwhile keeps its sessions. What a re-check cannot close
	// (a rejoin during the Apply itself) the home node repairs: it closes
	// a live connection whose session was detached with a reconnect code,
	// and the client resumes (node/mapsvc closeLost; DESIGN.md).
	if r.memberAlive(a.id) {
		r.log.Info("session detach skipped: node is alive again", "session_id", a.session, "peer", a.id)
		return nil
	}
	meta := &concordv1.CommandMeta{TimestampMs: now.UnixMilli(), NodeId: r.cfg.NodeID}
	for range 1 + len(r.deps.Sessions.SessionAgents(a.session)) {
		meta.EventIds = append(meta.EventIds, ulid.Make().String())
	}
	_, _, err := r.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH, &concordv1.SessionDetachRequest{
		Meta: meta, SessionId: a.session, Epoch: epoch, Reason: a.reason, HomeNode: a.id,
		TtlMs: r.cfg.DetachedSessionTTL.Milliseconds(),
	})
	if err != nil {
		return fmt.Errorf("detach session: %w", err)
	}
	r.log.Info("session of departed node detached", "session_id", a.session, "peer", a.id, "reason", a.reason)
	return nil
}

// memberAlive reports whether gossip shows id alive now.
func (r *Reconciler) memberAlive(id string) bool {
	for _, m := range r.deps.Members.Members() {
		if m.ID == id {
			return m.Status == membership.StatusAlive
		}
	}
	return false
}

// String names an action kind in logs.
func (k actionKind) String() string {
	switch k {
	case actAddVoter:
		return "add_voter"
	case actRemove:
		return "remove_server"
	case actDetach:
		return "detach_session"
	case actAddNonvoter:
		return "add_nonvoter"
	case actDemote:
		return "demote_voter"
	}
	return "unknown"
}
