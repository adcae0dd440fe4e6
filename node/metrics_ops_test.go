package node_test

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
)

// metricValue scrapes srv's /metrics and sums the samples of the series
// whose name and labels start with prefix (e.g. `concord_runs{` or a full
// series with labels).
func metricValue(t *testing.T, srv *node.Server, prefix string) float64 {
	t.Helper()
	resp, err := httpsClient("dev", "alice").Get(srv.HTTPURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("bad sample %q", line)
		}
		sum, found = sum+v, true
	}
	if !found {
		t.Fatalf("no series %s on /metrics", prefix)
	}
	return sum
}

// TestMetrics_OperatorSeries checks the operator metrics the Grafana
// dashboard reads move with real traffic: a follower's writes count as
// forwarded, a cross-node send as relayed out on the sender's node and in
// on the recipient's, and the replicated gauges (agents, sessions, term)
// agree on every node.
func TestMetrics_OperatorSeries(t *testing.T) {
	servers := startCluster(t, 3)
	leader := agreedLeader(t, servers)
	var f []*node.Server
	for _, s := range servers {
		if s != leader {
			f = append(f, s)
		}
	}
	inbox := make(chan json.RawMessage, 4)
	b := dialWith(t, f[1], notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/message" {
			inbox <- params
		}
	}))
	b.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	b.call("map/agents/register", map[string]any{"agentId": "bob"})
	a := dial(t, f[0])
	a.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	a.call("map/agents/register", map[string]any{"agentId": "alice"})
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := f[0].Registry().Agent("bob"); !ok; _, ok = f[0].Registry().Agent("bob") {
		if time.Now().After(deadline) {
			t.Fatal("bob's registration never reached alice's node")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.call("map/send", map[string]any{"to": map[string]any{"agent": "bob"}, "payload": map[string]any{"hi": 1}})
	select {
	case <-inbox:
	case <-time.After(5 * time.Second):
		t.Fatal("bob never received the message")
	}

	if v := metricValue(t, f[0], "concord_raft_forwarded_total"); v < 2 {
		t.Errorf("follower forwarded %v writes, want >= 2 (connect, register)", v)
	}
	if v := metricValue(t, leader, "concord_raft_forwarded_total"); v != 0 {
		t.Errorf("leader counted %v forwarded writes", v)
	}
	if v := metricValue(t, f[0], "concord_messages_relayed_out_total"); v != 1 {
		t.Errorf("sender's node relayed out %v messages, want 1", v)
	}
	if v := metricValue(t, f[1], `concord_messages_relayed_in_total{result="ok"}`); v != 1 {
		t.Errorf("recipient's node relayed in %v messages, want 1", v)
	}
	for _, s := range servers {
		deadline := time.Now().Add(5 * time.Second)
		for metricValue(t, s, "concord_agents{") != 2 && time.Now().Before(deadline) {
			time.Sleep(25 * time.Millisecond)
		}
		if v := metricValue(t, s, "concord_agents{"); v != 2 {
			t.Errorf("node shows %v agents, want 2", v)
		}
		if v := metricValue(t, s, "concord_sessions{"); v != 2 {
			t.Errorf("node shows %v sessions, want 2", v)
		}
		if v := metricValue(t, s, "concord_raft_term{"); v < 1 {
			t.Errorf("term %v", v)
		}
		if v := metricValue(t, s, `concord_runs{node_id="`+s.Store().ID()+`",status="running"}`); v != 0 {
			t.Errorf("%v runs in flight, want 0", v)
		}
	}
}
