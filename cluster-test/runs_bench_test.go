package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/agentbridge"
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
// "default" uses raftstore.DefaultConfig's raft timings (multiplier 5:
// heartbeat and election 500 ms, leader lease 250 ms, commit 50 ms),
// "tuned" the operators' fastest profile, `concord server
// --raft-multiplier 1` (TunedRaftMultiplier: 100 ms, 100 ms, 100 ms,
// 10 ms); everything else is FastConfig in both.
//
// Elections not caused by a kill are counted too: "spurious-elections"
// is how often the Raft term moved while no kill was being handled (the
// quiet time between kills: measuring, restarting the killed node, its
// agent resuming), and "terms-per-kill" how many terms each kill's
// election took (1 unless votes split).
func BenchmarkRuns_LeaderKillRedispatch(b *testing.B) {
	for _, tc := range raftProfiles {
		b.Run(tc.name, func(b *testing.B) {
			c := newProfiledCluster(b, tc.multiplier)
			bench := newRedispatchBench(b, c)
			var elect, redispatch, driver []time.Duration
			var killTerms uint64
			for range b.N {
				for range benchKills {
					k := bench.killLeader(b)
					elect, redispatch, driver = append(elect, k.elect), append(redispatch, k.redispatch), append(driver, k.redispatch-k.elect)
					killTerms += k.terms
				}
			}
			bench.countQuietTerms(b) // the quiet time after the last kill
			reportPercentiles(b, "election", elect)
			reportPercentiles(b, "redispatch", redispatch)
			reportPercentiles(b, "driver", driver)
			b.ReportMetric(float64(bench.spurious), "spurious-elections")
			b.ReportMetric(float64(killTerms)/float64(len(elect)), "terms-per-kill")
			b.Logf("%s (raft multiplier %d): election %v; redispatch %v; %d spurious elections",
				tc.name, tc.multiplier, roundAll(elect), roundAll(redispatch), bench.spurious)
		})
	}
}

// redispatchBench is a cluster with one run whose three tasks stay
// outstanding, each agent pinned to one node.
type redispatchBench struct {
	c      *Cluster
	agents []*runAgent // agent k on node k
	tasks  []string    // agent k's task id

	// lastTerm is the term the cluster settled in after the last kill
	// (or at start); spurious counts term changes seen outside kills.
	lastTerm uint64
	spurious uint64
}

// killResult is one kill's measurements.
type killResult struct {
	elect, redispatch time.Duration
	terms             uint64 // terms the election took (1 = first try)
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
	rb.lastTerm = maxTerm(c.Running())
	return rb
}

// countQuietTerms adds the term changes since lastTerm, when no kill was
// in progress, to spurious; it waits for a stable leader first, so an
// election still running is counted rather than missed.
func (rb *redispatchBench) countQuietTerms(b *testing.B) *Node {
	l := rb.c.Leader(b)
	if t := l.term(); t > rb.lastTerm {
		rb.spurious += t - rb.lastTerm
		b.Logf("%d election(s) outside a kill: term %d -> %d", t-rb.lastTerm, rb.lastTerm, t)
	}
	rb.lastTerm = l.term()
	return l
}

// maxTerm is the highest Raft term among nodes.
func maxTerm(nodes []*Node) uint64 {
	var t uint64
	for _, n := range nodes {
		t = max(t, n.term())
	}
	return t
}

// killLeader kills the leader once, measures, and restarts it; it returns
// the election and re-dispatch times.
func (rb *redispatchBench) killLeader(b *testing.B) (k killResult) {
	rb.requireAgentsHome(b)
	l := rb.countQuietTerms(b)
	before := rb.lastTerm
	survivors := others(rb.c.Running(), l)
	elected, stop := firstLeadership(survivors)
	killed := time.Now()
	rb.c.Kill(b, l.Index)
	select {
	case at := <-elected:
		k.elect = at.Sub(killed)
	case <-time.After(LeaderTimeout):
		b.Fatalf("no survivor became leader within %v of killing %s", LeaderTimeout, l)
	}
	stop()
	// The winner's term is final by the time it leads; from here until
	// the next kill the term should not move.
	rb.lastTerm = maxTerm(survivors)
	k.terms = rb.lastTerm - before
	err := Poll(context.Background(), DeliveryTimeout, func() error {
		k.redispatch = 0
		for i, a := range rb.agents {
			if i == l.Index {
				continue // its node is gone
			}
			var got time.Time
			for _, n := range a.receivedSince(killed) {
				if n.taskID == rb.tasks[i] && got.IsZero() {
					got = n.at
				}
			}
			if got.IsZero() {
				return fmt.Errorf("agent %s has not received %s again", a.id, rb.tasks[i])
			}
			k.redispatch = max(k.redispatch, got.Sub(killed))
		}
		return nil
	})
	if err != nil {
		b.Fatalf("after killing %s: %v", l, err)
	}
	rb.c.Restart(b, l.Index)
	return k
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

// quietPeriod is how long BenchmarkRaft_QuietElections leaves a cluster
// alone.
const quietPeriod = time.Minute

// BenchmarkRaft_QuietElections checks that a raft timing profile is
// stable: a 3-node cluster is left idle for quietPeriod and every election
// in that time is counted ("elections": Raft term changes, which must be
// 0) along with every time a node took leadership ("leader-changes"). The
// default profile runs beside the tuned one as the baseline. It ignores
// b.N.
func BenchmarkRaft_QuietElections(b *testing.B) {
	for _, tc := range raftProfiles {
		b.Run(tc.name, func(b *testing.B) {
			c := newProfiledCluster(b, tc.multiplier)
			start := c.Leader(b).term()
			var gained atomic.Int64
			var wg sync.WaitGroup
			var cancels []func()
			for _, n := range c.Running() {
				ch, cancel := n.Store().SubscribeLeadership()
				cancels = append(cancels, cancel)
				initial := <-ch // the current state, not a change
				wg.Go(func() {
					was := initial
					for leading := range ch {
						if leading && !was {
							gained.Add(1)
						}
						was = leading
					}
				})
			}
			time.Sleep(quietPeriod) // the measurement: time passing with nothing to do
			end := maxTerm(c.Running())
			b.ReportMetric(float64(end-start), "elections")
			b.ReportMetric(float64(gained.Load()), "leader-changes")
			b.Logf("%s (raft multiplier %d): term %d -> %d over %v, %d leader changes",
				tc.name, tc.multiplier, start, end, quietPeriod, gained.Load())
			for _, cancel := range cancels {
				cancel()
			}
			wg.Wait()
		})
	}
}

// raftProfiles are the raft timing profiles the failover benchmarks
// compare: the default beside the tuned one.
var raftProfiles = []struct {
	name       string
	multiplier int
}{
	{"default", raftstore.DefaultRaftMultiplier},
	{"tuned", TunedRaftMultiplier},
}

// newProfiledCluster starts 3 nodes with the given --raft-multiplier.
func newProfiledCluster(b *testing.B, multiplier int) *Cluster {
	return New(b, 3, WithLogLevel(slog.LevelWarn), WithNodeConfig(func(_ int, cfg *node.Config) {
		if err := cfg.Raft.SetRaftMultiplier(multiplier); err != nil {
			b.Fatal(err)
		}
	}))
}
