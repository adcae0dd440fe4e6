package clustertest

import (
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/argueclient"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestMapLink_DebateWithSDKAgent runs a debate homed in dc1 whose
// participants are alice of dc1 and sdk-bob, an SDK AgentConnection on the
// SDK's MAPServer linked as a system of kind map: the home leader's tasks
// reach sdk-bob through the link's proxy of concord.runs, his answers
// (reply(), whose meta MAPServer drops, paired by the link) come back to
// the runs service, and the run finishes with nobody eliminated.
func TestMapLink_DebateWithSDKAgent(t *testing.T) {
	nodeBin := requireSDK(t)
	const key = "map_sk_debate_0123456789abcdef"
	f := startSDKForeign(t, nodeBin, 0, key)
	ready := f.wait(time.Second, func(ev map[string]any) bool { return ev["event"] == "listening" })
	url, bob := ready["url"].(string), ready["bob"].(string)

	dc1 := New(t, 3) // the default system: the run agents trust its CA
	dc1.MapLink(t, 0, &concordv1.CreateMapLinkRequest{SystemId: "sdk", Url: url,
		Auth: &concordv1.FedMapAuth{Method: "api-key", Token: key}, Export: exportAll})
	Eventually(t, 20*time.Second, func() error { _, err := dc1.MapHolder("sdk"); return err })
	waitImported(t, dc1, "sdk", bob)

	startRunAgent(t, "alice", nodeURLs(dc1, 1), scriptAgents(personaScript(nil), &phaseGate{}))
	requireAgentsEverywhere(t, dc1, "alice")
	obs := newRunsObserver(t, nodeURLs(dc1, dc1.Leader(t).Index))
	rr := newRunRequestOf(t, "req-map-debate", "alice", runTaskTimeoutMs, []string{"alice", "sdk:agent:" + bob})
	runID := obs.start(t, rr)
	info := obs.waitDone(t, runID)
	if info.Status != argueclient.StatusFinished || len(info.Eliminations) > 0 {
		t.Fatalf("run %s ended %s, eliminations %+v, error %+v", runID, info.Status, info.Eliminations, info.Error)
	}
	tasks := 0
	for _, ev := range f.snapshot() {
		if p, _ := ev["payload"].(map[string]any); ev["event"] == "message" && p["type"] == "x-concord.run.task" {
			tasks++
		}
	}
	if tasks == 0 {
		t.Fatal("the SDK agent received no task")
	}
	t.Logf("run %s finished; the SDK agent answered %d tasks", runID, tasks)
}
