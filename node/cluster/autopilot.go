package cluster

import (
	"cmp"
	"slices"
	"time"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/raftstore"
)

// The autopilot keeps RaftVoters healthy voters, as Consul's autopilot
// does: writes stay on 3 or 5 servers however many join for connections,
// and a failed voter is replaced by the healthiest non-voter instead of
// leaving the system one failure closer to losing its quorum.
//
// Its rules, applied by plan after the removals of a pass (this file is
// pure; health.go gathers the health it decides from):
//   - fewer healthy voters than the target: promote healthy non-voters
//     that have been healthy for ServerStabilizationTime, least trailing
//     log first, then longest stable, then by id;
//   - more healthy voters than the target (a failed voter came back after
//     its replacement was promoted): demote the extras, most recently
//     healthy first, never the leader and never below MinQuorum voters;
//   - a draining server is never promoted, and a draining voter is demoted
//     once the target is met without it.
//
// A voter that is dead stays in the configuration until the dead-server
// cleanup removes it (plan's rules, never below MinQuorum), so a promotion
// briefly makes target+1 voters: the quorum grows by at most one while a
// majority of them is alive, which is what keeps writes going.

// ServerHealth is one configured server as the leader last saw it.
type ServerHealth struct {
	ID      string
	Address string // Raft address
	Voter   bool
	Leader  bool
	// Status is the gossip status: alive, left, dead or unknown.
	Status   string
	Version  string
	Draining bool
	// FSMLevel is the FSM level its build advertises (0: unknown).
	FSMLevel int
	// LastContact is how long ago the server heard from the leader (0 for
	// the leader itself, -1 when unknown).
	LastContact  time.Duration
	LastIndex    uint64
	TrailingLogs uint64
	Healthy      bool
	// StableSince is when the server last became healthy; zero while it
	// is not.
	StableSince time.Time
	// Reason says why it is not healthy.
	Reason string
}

// HealthReport is the autopilot's view of the whole system, as Consul's
// `operator autopilot state` shows it.
type HealthReport struct {
	LeaderID string
	// Healthy is true when every configured server is healthy.
	Healthy bool
	// FailureTolerance is how many more voters may fail with a quorum
	// left: healthy voters minus a quorum of the configured voters.
	FailureTolerance int
	TargetVoters     int
	MinQuorum        int
	// SystemFSMLevel is the FSM level recorded in replicated state (0:
	// none yet): a server below it refuses to apply (registry levels.go).
	SystemFSMLevel int
	Servers        []ServerHealth // by id
	ObservedAt     time.Time
}

// autopilot returns the promotions and demotions that bring the healthy
// voters to in.target; removed holds the servers this pass removes.
func autopilot(in planInput, removed map[string]bool) []action {
	type cand struct {
		id, addr string
		h        ServerHealth
	}
	var healthy, draining, nonvoters []cand
	total := 0
	for _, s := range in.servers {
		if removed[s.ID] {
			continue
		}
		h, ok := in.health[s.ID]
		m := in.members[s.ID]
		c := cand{id: s.ID, addr: s.Address, h: h}
		if s.Voter {
			total++
			switch {
			case m.draining && s.ID != in.self:
				draining = append(draining, c)
			case ok && h.Healthy:
				healthy = append(healthy, c)
			}
			continue
		}
		stable := ok && h.Healthy && !h.StableSince.IsZero() && in.now.Sub(h.StableSince) >= in.stable
		if stable && !m.draining && (m.raftVoters == 0 || m.raftVoters == in.target) {
			nonvoters = append(nonvoters, c)
		}
	}
	var out []action
	switch {
	case len(healthy) < in.target:
		slices.SortFunc(nonvoters, func(a, b cand) int {
			return cmp.Or(cmp.Compare(a.h.TrailingLogs, b.h.TrailingLogs),
				a.h.StableSince.Compare(b.h.StableSince), cmp.Compare(a.id, b.id))
		})
		for _, c := range nonvoters[:min(in.target-len(healthy), len(nonvoters))] {
			out = append(out, action{kind: actAddVoter, id: c.id, addr: c.addr, reason: "healthy voters below the target: promoting the healthiest non-voter"})
			healthy = append(healthy, c)
			total++
		}
	case len(healthy) > in.target:
		extras := slices.DeleteFunc(slices.Clone(healthy), func(c cand) bool { return c.id == in.self })
		slices.SortFunc(extras, func(a, b cand) int {
			return cmp.Or(b.h.StableSince.Compare(a.h.StableSince), cmp.Compare(b.id, a.id))
		})
		for _, c := range extras {
			if len(healthy) <= in.target || total-1 < in.minQuo {
				break
			}
			out = append(out, action{kind: actDemote, id: c.id, reason: "more healthy voters than the target"})
			healthy = slices.DeleteFunc(healthy, func(h cand) bool { return h.id == c.id })
			total--
		}
	}
	for _, c := range draining {
		if len(healthy) < in.target || total-1 < in.minQuo {
			break
		}
		out = append(out, action{kind: actDemote, id: c.id, reason: "draining"})
		total--
	}
	return out
}

// addUnderTarget is plan's add rule when a target number of voters is
// set: a server missing from the configuration joins as a non-voter (the
// autopilot promotes it once it is stable), one at a new Raft address is
// re-added with its suffrage, and a member advertising another target is
// left out (its operator must fix the flag; the reconciler logs it).
func addUnderTarget(target int, m memberView, s raftstore.Server, configured bool) (action, bool) {
	switch {
	case m.raftVoters != 0 && m.raftVoters != target:
		return action{}, false
	case !configured:
		return action{kind: actAddNonvoter, id: m.id, addr: m.raftAddr, reason: "alive server joins as a non-voter"}, true
	case s.Address == m.raftAddr:
		return action{}, false
	case s.Voter:
		return action{kind: actAddVoter, id: m.id, addr: m.raftAddr, reason: "voter moved to a new raft address"}, true
	default:
		return action{kind: actAddNonvoter, id: m.id, addr: m.raftAddr, reason: "non-voter moved to a new raft address"}, true
	}
}

// failureTolerance is healthy voters minus the quorum of all voters.
func failureTolerance(voters, healthyVoters int) int {
	if voters == 0 {
		return 0
	}
	return max(0, healthyVoters-(voters/2+1))
}

// statusName names a gossip status for reports.
func statusName(st membership.Status) string {
	switch st {
	case membership.StatusAlive:
		return "alive"
	case membership.StatusLeft:
		return "left"
	case membership.StatusDead:
		return "dead"
	}
	return "unknown"
}
