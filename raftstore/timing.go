package raftstore

import (
	"fmt"
	"time"
)

// Raft timing profiles, after Consul's raft_multiplier: one integer scales
// every raft timeout from a base measured for a LAN, so an operator trades
// failover time against tolerance of slow hosts and networks with one knob
// instead of four durations whose invariants (lease <= heartbeat <=
// election) are easy to break.
//
// Where failover time goes with a multiplier m (heartbeat H = m x 100 ms):
// a follower checks its leader at random intervals in [H, 2H] and starts
// an election only at the first check at least H after the last contact,
// so it notices a dead leader between H and about 3H after the kill. In a
// 3-server cluster the first survivor to notice cannot win yet: the other
// one still knows the old leader and refuses its (pre-)vote until its own
// check fires. A new leader is therefore elected about max(detectA,
// detectB) after the kill, which measured about 2H (p50) on loopback.
const (
	// DefaultRaftMultiplier is the multiplier of DefaultConfig: 500 ms
	// heartbeat and election timeouts, 250 ms leader lease, 50 ms commit
	// timeout; leader failover takes about a second on a LAN.
	DefaultRaftMultiplier = 5
	// MinRaftMultiplier is the fastest profile: 100 ms heartbeat and
	// election, 100 ms leader lease, 10 ms commit timeout; failover in a
	// few hundred milliseconds. It needs a low-latency LAN and hosts
	// without long CPU stalls: a leader that cannot reach a quorum for
	// 100 ms steps down (failing its in-flight writes), and a follower
	// that hears nothing for 100-200 ms starts an election.
	MinRaftMultiplier = 1
	// MaxRaftMultiplier is the most tolerant profile (1 s heartbeat),
	// for WAN links or badly overloaded hosts.
	MaxRaftMultiplier = 10
)

// lanBase is the multiplier-1 profile before minLeaderLease applies. The
// lease is half the heartbeat and the commit timeout a tenth of it, raft's
// own proportions.
var lanBase = Timings{
	HeartbeatTimeout:   100 * time.Millisecond,
	ElectionTimeout:    100 * time.Millisecond,
	LeaderLeaseTimeout: 50 * time.Millisecond,
	CommitTimeout:      10 * time.Millisecond,
}

// minLeaderLease is the shortest leader lease a profile gets. The lease
// does not speed failover up (followers detect a dead leader by the
// heartbeat timeout); it only bounds how long a cut-off leader keeps
// leading. At 50 ms, leaders on the shared 2-core machine stepped down
// dozens of times a minute with last contacts of 55-80 ms, each step-down
// failing in-flight writes, so multiplier 1 keeps a 100 ms lease (equal
// to its heartbeat, raft's upper bound).
const minLeaderLease = 100 * time.Millisecond

// Timings are the raft timeouts a Config carries (see the Config fields of
// the same names for what each one bounds). A plain value.
type Timings struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
}

// LANTimings returns the timing profile for multiplier m: the LAN base
// (100 ms heartbeat and election, 50 ms lease, 10 ms commit) times m, with
// the lease at least 100 ms (minLeaderLease).
// m must be between MinRaftMultiplier and MaxRaftMultiplier; otherwise the
// error matches ErrInvalidConfig.
func LANTimings(m int) (Timings, error) {
	if m < MinRaftMultiplier || m > MaxRaftMultiplier {
		return Timings{}, fmt.Errorf("%w: raft multiplier %d out of range: use %d (fastest failover, low-latency LAN) to %d (WAN or overloaded hosts); the default is %d",
			ErrInvalidConfig, m, MinRaftMultiplier, MaxRaftMultiplier, DefaultRaftMultiplier)
	}
	f := time.Duration(m)
	return Timings{
		HeartbeatTimeout:   f * lanBase.HeartbeatTimeout,
		ElectionTimeout:    f * lanBase.ElectionTimeout,
		LeaderLeaseTimeout: max(f*lanBase.LeaderLeaseTimeout, minLeaderLease),
		CommitTimeout:      f * lanBase.CommitTimeout,
	}, nil
}

// mustLANTimings is LANTimings for the package's own constant multipliers.
func mustLANTimings(m int) Timings {
	t, err := LANTimings(m)
	if err != nil {
		panic(err)
	}
	return t
}

// Timings returns c's raft timeouts.
func (c Config) Timings() Timings {
	return Timings{
		HeartbeatTimeout:   c.HeartbeatTimeout,
		ElectionTimeout:    c.ElectionTimeout,
		LeaderLeaseTimeout: c.LeaderLeaseTimeout,
		CommitTimeout:      c.CommitTimeout,
	}
}

// SetTimings replaces c's raft timeouts with t. Validate (and New) check
// the result against raft's rules.
func (c *Config) SetTimings(t Timings) {
	c.HeartbeatTimeout = t.HeartbeatTimeout
	c.ElectionTimeout = t.ElectionTimeout
	c.LeaderLeaseTimeout = t.LeaderLeaseTimeout
	c.CommitTimeout = t.CommitTimeout
}

// SetRaftMultiplier sets c's raft timeouts to LANTimings(m), or returns its
// error and leaves c unchanged.
func (c *Config) SetRaftMultiplier(m int) error {
	t, err := LANTimings(m)
	if err != nil {
		return err
	}
	c.SetTimings(t)
	return nil
}
