package admin

import (
	"context"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ServerHealth is one server as the leader's autopilot sees it.
type ServerHealth struct {
	ID, Address, Status, Version string
	Voter, Leader, Healthy       bool
	Draining                     bool
	// FSMLevel is the FSM level its build advertises (0: unknown).
	FSMLevel int
	// LastContact is how long ago it heard from the leader; -1 unknown.
	LastContact  time.Duration
	LastIndex    uint64
	TrailingLogs uint64
	// StableSince is when it last became healthy (zero while not).
	StableSince time.Time
	Reason      string
}

// Health is the autopilot's state of the system.
type Health struct {
	LeaderID         string
	Healthy          bool
	FailureTolerance int
	TargetVoters     int
	MinQuorum        int
	// SystemFSMLevel is the FSM level recorded in replicated state (0:
	// none yet, or an older leader).
	SystemFSMLevel int
	Servers        []ServerHealth
	ObservedAt     time.Time
}

// Health asks for the leader's health report (any node passes it on).
func (c *Client) Health(ctx context.Context) (Health, error) {
	res, err := c.operator.Health(ctx, &concordv1.OperatorHealthRequest{})
	if err != nil {
		return Health{}, err
	}
	h := Health{
		LeaderID: res.GetLeaderId(), Healthy: res.GetHealthy(), FailureTolerance: int(res.GetFailureTolerance()),
		TargetVoters: int(res.GetTargetVoters()), MinQuorum: int(res.GetMinQuorum()), ObservedAt: time.UnixMilli(res.GetObservedAtMs()),
		SystemFSMLevel: int(res.GetSystemFsmLevel()),
	}
	for _, s := range res.GetServers() {
		sh := ServerHealth{
			ID: s.GetId(), Address: s.GetAddress(), Status: s.GetStatus(), Version: s.GetVersion(),
			Voter: s.GetVoter(), Leader: s.GetLeader(), Healthy: s.GetHealthy(), Draining: s.GetDraining(),
			LastContact: time.Duration(s.GetLastContactMs()) * time.Millisecond, LastIndex: s.GetLastIndex(),
			TrailingLogs: s.GetTrailingLogs(), Reason: s.GetReason(), FSMLevel: int(s.GetFsmLevel()),
		}
		if s.GetLastContactMs() < 0 {
			sh.LastContact = -1
		}
		if ms := s.GetStableSinceMs(); ms > 0 {
			sh.StableSince = time.UnixMilli(ms)
		}
		h.Servers = append(h.Servers, sh)
	}
	return h, nil
}

// Drained is what a started drain reports.
type Drained struct {
	NodeID string
	// Sessions is the number of MAP connections asked to reconnect.
	Sessions int
	// ReconnectTo lists the MAP URLs offered to them.
	ReconnectTo []string
}

// DrainOptions are a drain's settings (see concord operator drain).
type DrainOptions struct {
	// Timeout bounds the wait for sessions to move; 0 is the node's default.
	Timeout time.Duration
	// PromotionTimeout bounds a voter's separate wait for its replacement
	// to be promoted (after Timeout); 0 is the node's default.
	PromotionTimeout time.Duration
	// Force drains a voter even when that takes the voters below
	// --min-quorum with no healthy non-voter to replace it.
	Force bool
}

// Drain starts draining node id (see concord operator drain).
func (c *Client) Drain(ctx context.Context, id string, opts DrainOptions) (Drained, error) {
	res, err := c.operator.Drain(ctx, &concordv1.OperatorDrainRequest{NodeId: id, TimeoutMs: opts.Timeout.Milliseconds(),
		PromotionTimeoutMs: opts.PromotionTimeout.Milliseconds(), Force: opts.Force})
	if err != nil {
		return Drained{}, err
	}
	return Drained{NodeID: res.GetNodeId(), Sessions: int(res.GetSessions()), ReconnectTo: res.GetReconnectTo()}, nil
}
