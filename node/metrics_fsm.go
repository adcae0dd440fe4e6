package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fsmApplyTimer is the FSM's apply-time histogram by command type: the
// state machine's own share of a write (the module handler), on every
// replica, beside concord_raft_apply_duration_seconds which measures the
// whole proposal on the proposing node. A slow command type here slows
// every write behind it, since the FSM applies one entry at a time.
type fsmApplyTimer struct {
	vec *prometheus.HistogramVec
	// byType caches the children: observe runs on the FSM goroutine only
	// (raftstore.Config.ObserveApply), so no lock is needed.
	byType [256]prometheus.Observer
}

func newFSMApplyTimer() *fsmApplyTimer {
	return &fsmApplyTimer{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "concord_fsm_apply_duration_seconds",
		Help:    "Time the state machine spends applying one committed command, by command type (every replica).",
		Buckets: prometheus.ExponentialBuckets(0.000001, 4, 11), // 1 µs .. ~1 s
	}, []string{"command"})}
}

// observe implements raftstore.Config.ObserveApply.
func (f *fsmApplyTimer) observe(t concordv1.CommandType, d time.Duration) {
	if t <= 0 || t > 255 {
		return
	}
	o := f.byType[t]
	if o == nil {
		o = f.vec.WithLabelValues(t.String())
		f.byType[t] = o
	}
	o.Observe(d.Seconds())
}
