package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/agentbridge"
	"github.com/concordmap/concord/raftstore"
)

// benchKills is how many leader kills one benchmark iteration measures.
const benchKills = 10

// BenchmarkRuns_LeaderKillRedispatch measures how long a replicated run
// stops dispatching when its leader dies: from the kill (the leader cut
// off and torn down, as Cluster.Kill does) until the new leader's driver
// has re-sent the outstanding tasks, observed as every agent still
// connected receiving its task message again. Beside it, in the same
// kills, the plain leader-election time: from the kill until a survivor
// becomes leader (its raftstore leadership notification), and per kill
// the difference of the two ("driver": new leader known -> tasks re-sent,
// the runs driver's own share).
//
// One run is started with agents that hold their tasks (never answer,
// per-task timeout of an hour), so every kill finds three outstanding
// round tasks. Agent k is connected to node k only: the agent of the
// killed node drops out of that sample (it measures client failover, not
// the driver) and resumes its session when the node is restarted, before
// the next kill. benchKills kills per iteration; p50 and p90 over all of
// them are reported in milliseconds.
//
// "default" uses raftstore.DefaultConfig's raft timings (heartbeat and
// election 500 ms, leader lease 250 ms, commit 50 ms), "tuned" FastConfig's
// (300 ms, 300 ms, 300 ms, 10 ms); everything else is FastConfig in both.
func BenchmarkRuns_LeaderKillRedispatch(b *testing.B) {
	def := raftstore.DefaultConfig()
	for _, tc := range []struct {
		name string
		raft func(*raftstore.Config)
	}{
		{"default", func(c *raftstore.Config) {
			c.HeartbeatTimeout, c.ElectionTimeout = def.HeartbeatTimeout, def.ElectionTimeout
			c.LeaderLeaseTimeout, c.CommitTimeout = def.LeaderLeaseTimeout, def.CommitTimeout
		}},
		{"tuned", func(*raftstore.Config) {}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := New(b, 3, WithLogLevel(slog.LevelWarn),
				WithNodeConfig(func(_ int, cfg *node.Config) { tc.raft(&cfg.Raft) }))
			bench := newRedispatchBench(b, c)
			var elect, redispatch, driver []time.Duration
			for range b.N {
				for range benchKills {
					e, r := bench.killLeader(b)
					elect, redispatch, driver = append(elect, e), append(redispatch, r), append(driver, r-e)
				}
			}
			reportPercentiles(b, "election", elect)
			reportPercentiles(b, "redispatch", redispatch)
			reportPercentiles(b, "driver", driver)
			b.Logf("%s: election %v; redispatch %v", tc.name, roundAll(elect), roundAll(redispatch))
		})
	}
}

// redispatchBench is a cluster with one run whose three tasks stay
// outstanding, each agent pinned to one node.
type redispatchBench struct {
	c      *Cluster
	agents []*runAgent // agent k on node k
	tasks  []string    // agent k's task id
}

func newRedispatchBench(b *testing.B, c *Cluster) *redispatchBench {
	hold := agentbridge.HandlerFunc(func(ctx context.Context, _ *agentbridge.Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	rb := &redispatchBench{c: c}
	for k, id := range runParticipants {
		rb.agents = append(rb.agents, startRunAgent(b, id, []string{c.Node(k).MAPURL()}, hold))
	}
	requireAgentsEverywhere(b, c, runParticipants...)
	obs := newRunsObserver(b, nodeURLs(c, 0))
	runID := obs.start(b, newRunRequest(b, "req-bench-redispatch", "alice", 3_600_000))
	for k, id := range runParticipants {
		rb.tasks = append(rb.tasks, runID+"/r0/"+id)
		requireResent(b, map[string]*runAgent{id: rb.agents[k]}, rb.tasks[k:k+1], time.Time{})
	}
	return rb
}

// killLeader kills the leader once, measures, and restarts it; it returns
// the election and re-dispatch times.
func (rb *redispatchBench) killLeader(b *testing.B) (elect, redispatch time.Duration) {
	l := rb.c.Leader(b)
	rb.requireAgentsHome(b)
	elected, stop := firstLeadership(others(rb.c.Running(), l))
	killed := time.Now()
	rb.c.Kill(b, l.Index)
	select {
	case at := <-elected:
		elect = at.Sub(killed)
	case <-time.After(LeaderTimeout):
		b.Fatalf("no survivor became leader within %v of killing %s", LeaderTimeout, l)
	}
	stop()
	err := Poll(context.Background(), DeliveryTimeout, func() error {
		redispatch = 0
		for k, a := range rb.agents {
			if k == l.Index {
				continue // its node is gone
			}
			var got time.Time
			for _, n := range a.receivedSince(killed) {
				if n.taskID == rb.tasks[k] && got.IsZero() {
					got = n.at
				}
			}
			if got.IsZero() {
				return fmt.Errorf("agent %s has not received %s again", a.id, rb.tasks[k])
			}
			redispatch = max(redispatch, got.Sub(killed))
		}
		return nil
	})
	if err != nil {
		b.Fatalf("after killing %s: %v", l, err)
	}
	rb.c.Restart(b, l.Index)
	return elect, redispatch
}

// requireAgentsHome waits until agent k is connected to node k again (the
// agent of a restarted node reconnects there) and every replica has it
// owned by the session it is connected with. The registry alone is not
// enough: a killed node's sessions still look attached to it, so a stale
// "home" would let a kill start while an agent is still reconnecting.
func (rb *redispatchBench) requireAgentsHome(b *testing.B) {
	b.Helper()
	Eventually(b, MembershipTimeout, func() error {
		for k, ra := range rb.agents {
			sess := ra.client.Session()
			if sess.URL != rb.c.Node(k).MAPURL() {
				return fmt.Errorf("agent %s is not connected to %s (url %q)", ra.id, rb.c.Node(k), sess.URL)
			}
			for _, n := range rb.c.Running() {
				a, ok := n.Server().Registry().Agent(ra.id)
				if !ok || a.OwnerID == "" || a.SessionID != sess.SessionID || a.HomeNode != rb.c.Node(k).ID {
					return fmt.Errorf("%s: agent %s registered %v, owner %q, session %s home %q; want session %s home %s",
						n, ra.id, ok, a.OwnerID, a.SessionID, a.HomeNode, sess.SessionID, rb.c.Node(k))
				}
			}
		}
		return nil
	})
}

// firstLeadership watches nodes' leadership notifications and delivers
// the time the first of them becomes leader; stop ends the watch and
// waits for its goroutines.
func firstLeadership(nodes []*Node) (<-chan time.Time, func()) {
	out := make(chan time.Time, len(nodes))
	var wg sync.WaitGroup
	var cancels []func()
	for _, n := range nodes {
		ch, cancel := n.Store().SubscribeLeadership()
		cancels = append(cancels, cancel)
		wg.Go(func() {
			for leading := range ch {
				if leading {
					out <- time.Now()
					return
				}
			}
		})
	}
	var once sync.Once
	return out, func() {
		once.Do(func() {
			for _, cancel := range cancels {
				cancel()
			}
			wg.Wait()
		})
	}
}

// reportPercentiles reports p50 and p90 of ds in milliseconds.
func reportPercentiles(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	pct := func(p float64) float64 {
		return float64(s[int(p*float64(len(s)-1)+0.5)].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), name+"-p50-ms")
	b.ReportMetric(pct(0.9), name+"-p90-ms")
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
