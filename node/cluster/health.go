package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// StatusFetcher asks a server for its Raft statistics (the Status RPC's
// raft_stats: last_contact, last_log_index, ...).
type StatusFetcher interface {
	RaftStats(ctx context.Context, nodeID string) (map[string]string, error)
}

// peerStatus fetches stats over the Cluster service's Status RPC.
type peerStatus struct {
	pool     *pool
	resolver AddrResolver
	dial     time.Duration
}

// RaftStats implements StatusFetcher.
func (p peerStatus) RaftStats(ctx context.Context, nodeID string) (map[string]string, error) {
	addr, ok := p.resolver.GRPCAddr(nodeID)
	if !ok {
		return nil, fmt.Errorf("%s has no known grpc address", nodeID)
	}
	cc, err := p.pool.get(nodeID, addr)
	if err != nil {
		return nil, err
	}
	if !waitReady(ctx, cc, p.dial) {
		return nil, fmt.Errorf("%s at %s not reachable", nodeID, addr)
	}
	resp, err := concordv1.NewClusterClient(cc).Status(ctx, &concordv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", nodeID, err)
	}
	return resp.GetRaftStats(), nil
}

// healthChecker gathers the leader's view of every configured server for
// the autopilot and the operator's health report. check runs on the
// reconciler's goroutine only; the report is read by the Operator service.
type healthChecker struct {
	cfg   Config
	fetch StatusFetcher // nil: gossip status alone decides
	since map[string]time.Time

	mu     sync.Mutex
	report HealthReport // guarded by mu
	valid  bool         // guarded by mu: report is from a pass as leader
}

func newHealthChecker(cfg Config, fetch StatusFetcher) *healthChecker {
	return &healthChecker{cfg: cfg, fetch: fetch, since: map[string]time.Time{}}
}

// check looks at every server of in.servers (self is the leader) and
// returns their health by id. self holds the leader's own raft stats.
func (h *healthChecker) check(ctx context.Context, in planInput, self map[string]string) map[string]ServerHealth {
	leaderLast, _ := strconv.ParseUint(self["last_log_index"], 10, 64)
	out := make([]ServerHealth, len(in.servers))
	var wg sync.WaitGroup
	for i, s := range in.servers {
		m, known := in.members[s.ID]
		sh := ServerHealth{ID: s.ID, Address: s.Address, Voter: s.Voter, Status: statusName(m.status),
			Version: m.version, Draining: m.draining, FSMLevel: m.fsmLevel, LastContact: -1}
		if s.ID == in.self {
			sh.Leader, sh.LastContact, sh.LastIndex, sh.Healthy = true, 0, leaderLast, true
			out[i] = sh
			continue
		}
		out[i] = sh
		switch {
		case !known || m.status != membership.StatusAlive:
			out[i].Reason = "gossip: " + sh.Status
			continue
		case h.fetch == nil:
			out[i].Healthy = true // no way to ask: alive is all we know
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, h.cfg.DialTimeout)
			defer cancel()
			stats, err := h.fetch.RaftStats(cctx, s.ID)
			if err != nil {
				out[i].Reason = err.Error()
				return
			}
			h.judge(&out[i], stats, leaderLast)
		})
	}
	wg.Wait()
	byID := make(map[string]ServerHealth, len(out))
	seen := make(map[string]bool, len(out))
	for i := range out {
		sh := &out[i]
		seen[sh.ID] = true
		if !sh.Healthy {
			delete(h.since, sh.ID)
		} else if _, ok := h.since[sh.ID]; !ok {
			h.since[sh.ID] = in.now
		}
		sh.StableSince = h.since[sh.ID]
		byID[sh.ID] = *sh
	}
	for id := range h.since {
		if !seen[id] {
			delete(h.since, id)
		}
	}
	h.publish(in, out)
	return byID
}

// judge fills a server's figures from its stats and decides whether it is
// healthy: it heard from the leader within LastContactThreshold and
// trails the leader's log by at most MaxTrailingLogs.
func (h *healthChecker) judge(sh *ServerHealth, stats map[string]string, leaderLast uint64) {
	sh.LastIndex, _ = strconv.ParseUint(stats["last_log_index"], 10, 64)
	if leaderLast > sh.LastIndex {
		sh.TrailingLogs = leaderLast - sh.LastIndex
	}
	lc := stats["last_contact"]
	d, err := time.ParseDuration(lc)
	switch {
	case lc == "never" || err != nil:
		sh.Reason = "no contact with the leader"
		return
	case d > h.cfg.LastContactThreshold:
		sh.LastContact = d
		sh.Reason = fmt.Sprintf("last contact %s ago, over %s", d.Round(time.Millisecond), h.cfg.LastContactThreshold)
		return
	}
	sh.LastContact = d
	if sh.TrailingLogs > h.cfg.MaxTrailingLogs {
		sh.Reason = fmt.Sprintf("%d log entries behind, over %d", sh.TrailingLogs, h.cfg.MaxTrailingLogs)
		return
	}
	sh.Healthy = true
}

// publish stores the report the Operator service serves.
func (h *healthChecker) publish(in planInput, servers []ServerHealth) {
	servers = slices.Clone(servers)
	slices.SortFunc(servers, func(a, b ServerHealth) int { return cmp.Compare(a.ID, b.ID) })
	rep := HealthReport{LeaderID: in.self, Healthy: true, TargetVoters: h.cfg.RaftVoters, MinQuorum: h.cfg.MinQuorum,
		SystemFSMLevel: in.recorded, Servers: servers, ObservedAt: in.now}
	voters, healthy := 0, 0
	for _, s := range servers {
		rep.Healthy = rep.Healthy && s.Healthy
		if s.Voter {
			voters++
			if s.Healthy {
				healthy++
			}
		}
	}
	rep.FailureTolerance = failureTolerance(voters, healthy)
	h.mu.Lock()
	h.report, h.valid = rep, true
	h.mu.Unlock()
}

// invalidate forgets the report when this node stops leading.
func (h *healthChecker) invalidate() {
	h.mu.Lock()
	h.valid = false
	h.mu.Unlock()
}

// latest returns the last report; ok is false unless this node is the
// leader that made it.
func (h *healthChecker) latest() (HealthReport, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.report, h.valid
}
