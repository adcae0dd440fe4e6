package node

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/concordmap/concord/node/cluster"
)

// The leader exports its autopilot report; a follower, or a leader
// before its first report, exports nothing (no stale values).
func TestAutopilotCollector(t *testing.T) {
	rep := cluster.HealthReport{Healthy: false, FailureTolerance: 0, TargetVoters: 3, Servers: []cluster.ServerHealth{
		{ID: "n1", Voter: true, Leader: true, Healthy: true},
		{ID: "n2", Voter: true, Healthy: true},
		{ID: "n3", Voter: true, Healthy: false},
		{ID: "n4", Healthy: true},
	}}
	leader, have := true, true
	c := newAutopilotCollector("n1", func() bool { return leader }, func() (cluster.HealthReport, bool) { return rep, have })
	want := `
# HELP concord_autopilot_failure_tolerance How many more voters may fail with a quorum left (healthy voters minus a quorum); exported by the leader.
# TYPE concord_autopilot_failure_tolerance gauge
concord_autopilot_failure_tolerance{node_id="n1"} 0
# HELP concord_autopilot_healthy 1 when every server of the Raft configuration is healthy (alive, in contact with the leader, caught up); exported by the leader.
# TYPE concord_autopilot_healthy gauge
concord_autopilot_healthy{node_id="n1"} 0
# HELP concord_autopilot_servers Servers of the Raft configuration by role (voter, non-voter) and health; exported by the leader.
# TYPE concord_autopilot_servers gauge
concord_autopilot_servers{healthy="false",node_id="n1",role="non-voter"} 0
concord_autopilot_servers{healthy="false",node_id="n1",role="voter"} 1
concord_autopilot_servers{healthy="true",node_id="n1",role="non-voter"} 1
concord_autopilot_servers{healthy="true",node_id="n1",role="voter"} 2
# HELP concord_autopilot_voters Raft voters: configured, healthy, and the --raft-voters target; exported by the leader.
# TYPE concord_autopilot_voters gauge
concord_autopilot_voters{kind="configured",node_id="n1"} 3
concord_autopilot_voters{kind="healthy",node_id="n1"} 2
concord_autopilot_voters{kind="target",node_id="n1"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		leader, have bool
	}{{"follower", false, true}, {"leader without a report yet", true, false}} {
		leader, have = tc.leader, tc.have
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series, want none", tc.name, n)
		}
	}
}
