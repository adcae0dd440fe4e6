package node

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/runs"
	"github.com/concordmap/concord/raftstore"
)

// Operator metrics: what deploy/grafana's dashboard and alert rules read
// (leader changes through the term, forwarded writes, relayed messages,
// sessions, runs in flight). Gauges are computed at scrape time from the
// replicated state; counters are bumped by thin wrappers the node puts
// around its components, so the hot-path packages stay free of metrics.

// opsCollector reads the replicated state at scrape time.
type opsCollector struct {
	store    *raftstore.Store
	registry registry.Reader
	runs     *runs.Module
	term     *prometheus.Desc
	sessions *prometheus.Desc
	agents   *prometheus.Desc
	runCount *prometheus.Desc
}

func newOpsCollector(nodeID string, store *raftstore.Store, reg registry.Reader, rm *runs.Module) *opsCollector {
	labels := prometheus.Labels{"node_id": nodeID}
	return &opsCollector{
		store: store, registry: reg, runs: rm,
		term: prometheus.NewDesc("concord_raft_term", "Current Raft term; each increase is an election (a leader change).", nil, labels),
		sessions: prometheus.NewDesc("concord_sessions", "Open MAP sessions in the system (replicated), by whether a node holds their connection.",
			[]string{"state"}, labels),
		agents:   prometheus.NewDesc("concord_agents", "Registered agents in the system (replicated).", nil, labels),
		runCount: prometheus.NewDesc("concord_runs", "Consensus runs held in the replicated state, by status (running = in flight).", []string{"status"}, labels),
	}
}

func (c *opsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.term
	ch <- c.sessions
	ch <- c.agents
	ch <- c.runCount
}

func (c *opsCollector) Collect(ch chan<- prometheus.Metric) {
	if term, err := strconv.ParseFloat(c.store.Stats()["term"], 64); err == nil {
		ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, term)
	}
	var connected, detached float64
	for _, s := range c.registry.Sessions() {
		if s.ClosedAt != 0 {
			continue
		}
		if s.Connected {
			connected++
		} else {
			detached++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, connected, "connected")
	ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, detached, "detached")
	ch <- prometheus.MustNewConstMetric(c.agents, prometheus.GaugeValue, float64(len(c.registry.Agents())))
	counts := c.runs.CountByStatus()
	for _, st := range []string{runs.StatusRunning, runs.StatusFinished, runs.StatusFailed, runs.StatusCancelled} {
		ch <- prometheus.MustNewConstMetric(c.runCount, prometheus.GaugeValue, float64(counts[st]), st)
	}
}

// relayMetrics count messages crossing nodes. They run per message, so
// they are plain atomics that Prometheus reads at scrape time (half the
// cost of a Counter's Inc under contention).
type relayMetrics struct {
	out, inOK, inFailed *atomic.Uint64
}

func newRelayMetrics(reg prometheus.Registerer) relayMetrics {
	m := relayMetrics{out: new(atomic.Uint64), inOK: new(atomic.Uint64), inFailed: new(atomic.Uint64)}
	read := func(n *atomic.Uint64) func() float64 { return func() float64 { return float64(n.Load()) } }
	in := func(result string, n *atomic.Uint64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "concord_messages_relayed_in_total",
			Help:        "Messages another node relayed to a recipient connected here, by result (ok, failed).",
			ConstLabels: prometheus.Labels{"result": result},
		}, read(n))
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "concord_messages_relayed_out_total",
			Help: "Messages this node handed to another node for a recipient connected there.",
		}, read(m.out)),
		in("ok", m.inOK), in("failed", m.inFailed))
	return m
}

// countingPeers wraps the router's link to other nodes.
type countingPeers struct {
	next router.Peers
	out  *atomic.Uint64
}

func (p countingPeers) Submit(ctx context.Context, nodeID string, msg *router.Envelope, done func(error)) {
	p.out.Add(1)
	p.next.Submit(ctx, nodeID, msg, done)
}

// countingDeliverer wraps the router as the receiving end of relays.
type countingDeliverer struct {
	next interface {
		DeliverLocal(ctx context.Context, env *router.Envelope) error
	}
	m relayMetrics
}

func (d countingDeliverer) DeliverLocal(ctx context.Context, env *router.Envelope) error {
	err := d.next.DeliverLocal(ctx, env)
	if err != nil {
		d.m.inFailed.Add(1)
	} else {
		d.m.inOK.Add(1)
	}
	return err
}

// opsMetrics are the counters above plus the forwarded-write counter.
type opsMetrics struct {
	relay relayMetrics
	// forwarded counts proposals made while this node was not the leader
	// (handed to the leader over gRPC).
	forwarded prometheus.Counter
}

// addOps registers the operator metrics on m's registry.
func (m *metrics) addOps(nodeID string, store *raftstore.Store, reg registry.Reader, rm *runs.Module) {
	m.ops.relay = newRelayMetrics(m.reg)
	m.ops.forwarded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "concord_raft_forwarded_total",
		Help: "Writes proposed on this node while it was a follower, forwarded to the leader.",
	})
	m.reg.MustRegister(m.ops.forwarded, newOpsCollector(nodeID, store, reg, rm))
}
