package clustertest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// procMapHolder reads which process holds the map link to peer, as the
// surviving processes report it in GET /v1/federation/links; all of
// them must agree on a running process.
func procMapHolder(pc *ProcCluster, peer string) (*Proc, error) {
	var holder string
	for _, p := range pc.Running() {
		code, body, err := pc.get(p.HTTPAddr, "/v1/federation/links")
		if err != nil || code != 200 {
			return nil, fmt.Errorf("%s: links: %d %v", p, code, err)
		}
		var res struct {
			Links []struct{ PeerSystemID, Kind, Holder string }
		}
		if err := json.Unmarshal(body, &res); err != nil {
			return nil, fmt.Errorf("%s: links: %w", p, err)
		}
		h := ""
		for _, l := range res.Links {
			if l.PeerSystemID == peer && l.Kind == "map" {
				h = l.Holder
			}
		}
		if h == "" || holder != "" && h != holder {
			return nil, fmt.Errorf("%s: holder of %s is %q (others %q)", p, peer, h, holder)
		}
		holder = h
	}
	for _, p := range pc.Running() {
		if p.ID == holder {
			return p, nil
		}
	}
	return nil, fmt.Errorf("holder %q of %s is not running", holder, peer)
}

// TestProcs_MapLinkSurvivesKill9OfItsHolder: three `concord server`
// processes (TLS) link the SDK's MAPServer with `concord federation link
// --kind map` run as an operator would; messages flow both ways; SIGKILL
// of the process holding the link makes the leader choose another, and
// the SDK agent's messages keep reaching alice.
func TestProcs_MapLinkSurvivesKill9OfItsHolder(t *testing.T) {
	nodeBin := requireSDK(t)
	const key = "map_sk_procs_0123456789abcdef"
	f := startSDKForeign(t, nodeBin, 0, key)
	ready := f.wait(time.Second, func(ev map[string]any) bool { return ev["event"] == "listening" })
	url, bob := ready["url"].(string), ready["bob"].(string)

	pc := StartProcs(t, 3)
	bin, op := ConcordBinary(t), OperatorEnv(t)
	keyFile := filepath.Join(t.TempDir(), "foreign.key")
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runBin(t, bin, op, "federation", "link", "--kind", "map", "--system-id", "sdk", "--url", url,
		"--auth-method", "api-key", "--auth-token-file", keyFile, "--export", "all", "--addr", pc.Proc(1).GRPCAddr); err != nil {
		t.Fatalf("federation link --kind map: %v\n%s", err, out)
	}
	var holder *Proc
	Eventually(t, 20*time.Second, func() (err error) { holder, err = procMapHolder(pc, "sdk"); return err })
	other := (holder.Index + 1) % 3
	alice := pc.Connect(t, other, map[string]any{"participantType": "agent", "participantId": "alice", "name": "alice",
		"disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	registerRetry(t, alice, "alice", nil)

	aliceToSDK(t, f, alice, bob, 1)
	n := sdkToAlice(t, f, alice, bob, 2)

	pc.Kill9(t, holder.Index)
	var next *Proc
	Eventually(t, 40*time.Second, func() (err error) {
		next, err = procMapHolder(pc, "sdk")
		if err == nil && next.ID == holder.ID {
			return fmt.Errorf("holder still %s", holder.ID)
		}
		return err
	})
	out, err := runBin(t, bin, op, "federation", "status", "--addr", pc.Proc(other).GRPCAddr)
	if err != nil || !strings.Contains(out, "(holder "+next.ID+")") {
		t.Fatalf("federation status after the kill does not name holder %s: %v\n%s", next.ID, err, out)
	}
	sdkToAlice(t, f, alice, bob, n+1)
	aliceToSDK(t, f, alice, bob, 1000)
}
