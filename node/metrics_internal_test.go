package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/concordmap/concord/node/rpc"
)

// TestMetrics_UnknownMethodsShareOneLabel: method names are client input,
// so requests answered -32601 must not create a series per invented name.
func TestMetrics_UnknownMethodsShareOneLabel(t *testing.T) {
	m := newMetrics("n1", nil)
	for i := range 5000 {
		m.RPCDone("x/"+strconv.Itoa(i), rpc.CodeMethodNotFound, time.Millisecond)
	}
	m.RPCDone("map/agents/list", 0, time.Millisecond)
	if n := testutil.CollectAndCount(m.rpcTotal); n != 2 {
		t.Fatalf("rpc_requests_total has %d series, want 2 (unknown + map/agents/list)", n)
	}
	if n := testutil.CollectAndCount(m.rpcDuration); n != 2 {
		t.Fatalf("rpc_duration_seconds has %d series, want 2", n)
	}
	if got := testutil.ToFloat64(m.rpcTotal.WithLabelValues(unknownMethodLabel, strconv.Itoa(rpc.CodeMethodNotFound))); got != 5000 {
		t.Fatalf("unknown counter = %v, want 5000", got)
	}
}
