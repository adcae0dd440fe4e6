package node_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestCluster_FalseFailureDetachDoesNotStrandAgent: gossip wrongly
// declares bob's node failed (a missed probe under load) and the leader
// detaches bob's session, as the reconciler does, just as the node
// rejoins. Bob's node is alive and his connection open; routing now sees
// bob's session detached. Before, the connection stayed open and bob
// never received anything again; now his node closes it with the
// reconnect code, bob resumes, and a send to him is delivered.
func TestCluster_FalseFailureDetachDoesNotStrandAgent(t *testing.T) {
	servers := startCluster(t, 3)
	leader := agreedLeader(t, servers)
	followers := followersOf(servers, leader)
	aliceNode, bobNode := followers[0], followers[1]
	alice := dial(t, aliceNode)
	alice.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent"})
	alice.call("map/agents/register", map[string]any{"agentId": "alice"})
	inbox := make(chan json.RawMessage, 4)
	onMessage := notifyFunc(func(method string, params json.RawMessage) {
		if method == "map/message" {
			inbox <- params
		}
	})
	bob := dialWith(t, bobNode, onMessage)
	res := bob.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "participantId": "bob",
		"disconnectPolicy": map[string]any{"agentBehavior": "grace-period", "gracePeriodMs": 60_000}})
	bob.call("map/agents/register", map[string]any{"agentId": "bob"})
	sid := res["sessionId"].(string)

	// The reconciler's detach of a node it saw failed.
	eventually(t, 5*time.Second, func() error {
		if _, ok := leader.Registry().Agent("bob"); !ok {
			return fmt.Errorf("bob's registration not applied on the leader")
		}
		return nil
	})
	const epoch = 1 // a new session's first attach
	meta := &concordv1.CommandMeta{TimestampMs: time.Now().UnixMilli(), NodeId: leader.Store().ID(),
		EventIds: []string{ulid.Make().String(), ulid.Make().String()}}
	if _, _, err := leader.Store().Apply(t.Context(), concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH, &concordv1.SessionDetachRequest{
		Meta: meta, SessionId: sid, Epoch: epoch, Reason: "node " + bobNode.Store().ID() + " failed", HomeNode: bobNode.Store().ID(),
	}); err != nil {
		t.Fatal(err)
	}

	select {
	case <-bob.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("bob's node kept his open connection after the cluster detached his session: he would receive nothing")
	}
	bob = dialWith(t, bobNode, onMessage)
	if r := bob.call("map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "resumeToken": res["resumeToken"]}); r["reconnected"] != true {
		t.Fatalf("resume: %v", r)
	}
	eventually(t, 5*time.Second, func() error {
		if a, ok := aliceNode.Registry().Agent("bob"); !ok || a.OwnerID == "" || a.HomeNode != bobNode.Store().ID() {
			return fmt.Errorf("bob on alice's node: %+v", a)
		}
		return nil
	})
	sent := alice.call("map/send", map[string]any{"to": map[string]any{"agent": "bob"}, "payload": map[string]any{"hi": 1}})
	if d, _ := sent["delivered"].([]any); len(d) != 1 || d[0] != "bob" {
		t.Fatalf("send after the resume: %v", sent)
	}
	select {
	case <-inbox:
	case <-time.After(5 * time.Second):
		t.Fatal("bob never received the message after resuming")
	}
}

// followersOf lists the servers other than leader.
func followersOf(servers []*node.Server, leader *node.Server) []*node.Server {
	var out []*node.Server
	for _, s := range servers {
		if s != leader {
			out = append(out, s)
		}
	}
	return out
}
