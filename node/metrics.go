package node

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// metrics holds the node's Prometheus collectors in a private registry, so
// several in-process nodes (tests) never collide on the global one.
type metrics struct {
	reg            *prometheus.Registry
	rpcTotal       *prometheus.CounterVec
	rpcDuration    *prometheus.HistogramVec
	connections    *prometheus.GaugeVec
	framesRejected *prometheus.CounterVec
	applyDuration  *prometheus.HistogramVec
	applyErrors    *prometheus.CounterVec
	ops            opsMetrics // metrics_ops.go

	// rpcByMethod caches the per-method children of rpcTotal (code 0) and
	// rpcDuration: WithLabelValues hashes the labels and takes the vec's
	// lock on every call, which showed in map/send profiles. Bounded by
	// maxCachedMethods because method names come from clients.
	rpcByMethod sync.Map // method -> *methodMetrics
	rpcCached   atomic.Int32
}

// unknownMethodLabel is the method label of every request answered -32601.
const unknownMethodLabel = "(unknown)"

// maxCachedMethods bounds rpcByMethod; methods past it take the slow path.
const maxCachedMethods = 256

// methodMetrics is one method's cached series. ok is created on the first
// success only, so a method that never succeeds exports no code="0" series
// (as with plain WithLabelValues).
type methodMetrics struct {
	dur prometheus.Observer
	ok  atomic.Pointer[prometheus.Counter]
}

func newMetrics(nodeID string, store *raftstore.Store) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rpcTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "concord_rpc_requests_total",
			Help: "MAP JSON-RPC requests handled, by method and result code (0 = success).",
		}, []string{"method", "code"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "concord_rpc_duration_seconds",
			Help:    "MAP JSON-RPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method"}),
		connections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "concord_connections",
			Help: "Open MAP connections by transport.",
		}, []string{"transport"}),
		framesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "concord_frames_rejected_total",
			Help: "Inbound frames refused before dispatch, by reason.",
		}, []string{"reason"}),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "concord_raft_apply_duration_seconds",
			Help:    "Time from proposing a Raft command to its result, by command type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"command"}),
		applyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "concord_raft_apply_errors_total",
			Help: "Raft proposals that failed before reaching the state machine (not leader, timeout, shutdown).",
		}, []string{"command"}),
	}
	m.reg.MustRegister(m.rpcTotal, m.rpcDuration, m.connections, m.framesRejected,
		m.applyDuration, m.applyErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newRaftCollector(nodeID, store))
	return m
}

// RPCDone, ConnOpened, ConnClosed and FrameRejected implement rpc.Observer.
func (m *metrics) RPCDone(method string, code int, d time.Duration) {
	if code == rpc.CodeMethodNotFound {
		// Method names come from clients: unknown ones share one label so
		// a peer cannot create a series per name it invents.
		method = unknownMethodLabel
	}
	mm := m.methodMetrics(method)
	if mm == nil {
		m.rpcTotal.WithLabelValues(method, strconv.Itoa(code)).Inc()
		m.rpcDuration.WithLabelValues(method).Observe(d.Seconds())
		return
	}
	if code != 0 {
		m.rpcTotal.WithLabelValues(method, strconv.Itoa(code)).Inc()
	} else {
		ok := mm.ok.Load()
		if ok == nil {
			c := m.rpcTotal.WithLabelValues(method, "0")
			ok = &c
			mm.ok.Store(ok)
		}
		(*ok).Inc()
	}
	mm.dur.Observe(d.Seconds())
}

// methodMetrics returns the cached series of method, or nil once the cache
// is full.
func (m *metrics) methodMetrics(method string) *methodMetrics {
	if v, ok := m.rpcByMethod.Load(method); ok {
		return v.(*methodMetrics)
	}
	if m.rpcCached.Load() >= maxCachedMethods {
		return nil
	}
	mm := &methodMetrics{dur: m.rpcDuration.WithLabelValues(method)}
	if v, loaded := m.rpcByMethod.LoadOrStore(method, mm); loaded {
		return v.(*methodMetrics)
	}
	m.rpcCached.Add(1)
	return mm
}
func (m *metrics) ConnOpened(transport string) { m.connections.WithLabelValues(transport).Inc() }
func (m *metrics) ConnClosed(transport string) { m.connections.WithLabelValues(transport).Dec() }
func (m *metrics) FrameRejected(reason string) { m.framesRejected.WithLabelValues(reason).Inc() }

// raftCollector reads the store's stats at scrape time instead of polling.
type raftCollector struct {
	store   *raftstore.Store
	state   *prometheus.Desc
	indexes *prometheus.Desc
	leader  *prometheus.Desc
}

func newRaftCollector(nodeID string, store *raftstore.Store) *raftCollector {
	labels := prometheus.Labels{"node_id": nodeID}
	return &raftCollector{
		store:   store,
		state:   prometheus.NewDesc("concord_raft_state", "1 for the node's current Raft state.", []string{"state"}, labels),
		indexes: prometheus.NewDesc("concord_raft_index", "Raft indexes by kind (applied, commit, last_log).", []string{"kind"}, labels),
		leader:  prometheus.NewDesc("concord_raft_has_leader", "1 when the node knows a leader.", nil, labels),
	}
}

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state
	ch <- c.indexes
	ch <- c.leader
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	stats := c.store.Stats()
	ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, 1, stats["state"])
	for _, kind := range []string{"applied_index", "commit_index", "last_log_index"} {
		if v, err := strconv.ParseFloat(stats[kind], 64); err == nil {
			ch <- prometheus.MustNewConstMetric(c.indexes, prometheus.GaugeValue, v, kind)
		}
	}
	has := 0.0
	if id, _ := c.store.Leader(); id != "" {
		has = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, has)
}

// meteredProposer wraps the store's Apply with latency and error metrics; it
// is the Proposer handed to the MAP service.
type meteredProposer struct {
	store *raftstore.Store
	m     *metrics
}

func (p meteredProposer) Apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	start := time.Now()
	forwarded := !p.store.IsLeader()
	res, idx, err := p.store.Apply(ctx, t, msg)
	name := t.String()
	if forwarded {
		p.m.ops.forwarded.Inc()
	}
	p.m.applyDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil && idx == 0 {
		p.m.applyErrors.WithLabelValues(name).Inc()
	}
	return res, idx, err
}

// residentBytes is the process's resident set size as the Prometheus process
// collector reports it (process_resident_memory_bytes), 0 where that
// collector cannot read it (platforms without procfs).
func (m *metrics) residentBytes() int64 {
	mfs, err := m.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "process_resident_memory_bytes" && len(mf.GetMetric()) > 0 {
			return int64(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}
