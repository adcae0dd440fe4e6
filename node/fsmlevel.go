package node

import (
	"context"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// fsmLevel is the registry FSM level (registry.FSMLevel) every server of
// the system enforces: the lowest level advertised in gossip by the
// servers of the Raft configuration, voters and non-voters, and by the
// alive servers gossip knows that are not in it yet (the reconciler is
// about to add them); from registry.FSMLevelSystemRecord on, also no more
// than the level recorded in replicated state (registry.GateLevel), so a
// level's fields reach the log only after the record that makes a build
// below it halt. mapsvc proposes a level-gated command field only
// when this reaches the field's level, the way Nomad and Consul gate a
// feature on every server meeting a minimum version (the version string
// cannot do it: builds of one release, and every dev build, share it).
// 0 while the configuration cannot be read.
//
// Every register asks, so the answer is kept for fsmLevelTTL: a server
// that starts advertising a lower level (an older binary joining, which
// the limit in raftstore/DESIGN.md "FSM levels" rules out anyway) closes
// the gate that much later than gossip tells this node.
func (s *Server) fsmLevel(ctx context.Context) int {
	now := time.Now()
	if c := s.fsmLevelCache.Load(); c != nil && now.Before(c.until) {
		return c.level
	}
	servers, err := s.store.Configuration(ctx)
	if err != nil {
		return 0
	}
	level := registry.GateLevel(lowestFSMLevel(servers, s.members.Members()), s.registry.SystemFSMLevel())
	s.fsmLevelCache.Store(&fsmLevelSample{level: level, until: now.Add(fsmLevelTTL)})
	return level
}

// FSMLevel is the FSM level this node's proposers rely on now (fsmLevel):
// the level-gated command fields up to it reach the log.
func (s *Server) FSMLevel(ctx context.Context) int { return s.fsmLevel(ctx) }

// fsmLevelTTL is how long fsmLevel keeps an answer.
const fsmLevelTTL = 250 * time.Millisecond

// fsmLevelSample is one fsmLevel answer and when it expires.
type fsmLevelSample struct {
	level int
	until time.Time
}

// lowestFSMLevel is fsmLevel's rule. A server of the configuration that
// gossip does not know (not seen yet, or forgotten) counts as level 0: it
// may run any version. A member that left and is not in the configuration
// does not count.
func lowestFSMLevel(servers []raftstore.Server, members []membership.Member) int {
	if len(servers) == 0 {
		return 0
	}
	byID := make(map[string]membership.Member, len(members))
	for _, m := range members {
		byID[m.ID] = m
	}
	inConfig := make(map[string]bool, len(servers))
	level := -1
	lower := func(l int) {
		if level < 0 || l < level {
			level = l
		}
	}
	for _, sv := range servers {
		inConfig[sv.ID] = true
		m, ok := byID[sv.ID]
		if !ok {
			return 0
		}
		lower(m.FSMLevel)
	}
	for _, m := range members {
		if !inConfig[m.ID] && m.Status == membership.StatusAlive {
			lower(m.FSMLevel)
		}
	}
	return max(level, 0)
}
