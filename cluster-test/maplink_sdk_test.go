package clustertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// sdkForeign is sdk/foreign.mjs running: the SDK's MAPServer with the SDK
// agent sdk-bob on it, driven through stdin and heard through stdout.
type sdkForeign struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu     sync.Mutex
	events []map[string]any
	change chan struct{}
}

// startSDKForeign runs foreign.mjs on port (0: any) requiring apiKey, and
// waits until it listens. It is killed at t's cleanup.
func startSDKForeign(t *testing.T, nodeBin string, port int, apiKey string) *sdkForeign {
	t.Helper()
	f := &sdkForeign{t: t, done: make(chan struct{}), change: make(chan struct{})}
	f.cmd = exec.Command(nodeBin, filepath.Join(sdkInteropDir, "foreign.mjs"), strconv.Itoa(port), apiKey)
	f.cmd.Stderr = t.Output()
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if f.stdin, err = f.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start foreign.mjs: %v", err)
	}
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			f.mu.Lock()
			f.events = append(f.events, ev)
			close(f.change)
			f.change = make(chan struct{})
			f.mu.Unlock()
		}
	}()
	t.Cleanup(f.kill)
	f.wait(20*time.Second, func(ev map[string]any) bool { return ev["event"] == "listening" })
	return f
}

// kill ends the process the hard way (SIGKILL) and reaps it.
func (f *sdkForeign) kill() {
	if f.cmd.ProcessState != nil {
		return
	}
	_ = f.cmd.Process.Kill()
	_ = f.cmd.Wait()
	<-f.done
}

// wait returns the first event (oldest first) match accepts, failing t
// after timeout.
func (f *sdkForeign) wait(timeout time.Duration, match func(map[string]any) bool) map[string]any {
	f.t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		ch := f.change
		for _, ev := range f.events {
			if match(ev) {
				f.mu.Unlock()
				return ev
			}
		}
		f.mu.Unlock()
		select {
		case <-ch:
		case <-f.done:
			f.t.Fatalf("foreign.mjs exited; events: %v", f.snapshot())
		case <-deadline:
			f.t.Fatalf("foreign.mjs: no matching event in %v; events: %v", timeout, f.snapshot())
		}
	}
}

func (f *sdkForeign) snapshot() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *sdkForeign) send(cmd map[string]any) {
	f.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := f.stdin.Write(append(b, '\n')); err != nil {
		f.t.Fatalf("foreign.mjs stdin: %v", err)
	}
}

// proxiesNamed asks foreign.mjs for its agents and counts the Concord
// proxies called name.
func (f *sdkForeign) proxiesNamed(name string) int {
	f.t.Helper()
	f.mu.Lock()
	nonce := len(f.events)
	f.mu.Unlock()
	f.send(map[string]any{"cmd": "list", "nonce": nonce})
	ev := f.wait(10*time.Second, func(ev map[string]any) bool { return ev["event"] == "agents" && ev["nonce"] == float64(nonce) })
	n := 0
	for _, a := range ev["agents"].([]any) {
		if a := a.(map[string]any); a["name"] == name && a["proxy"] == true {
			n++
		}
	}
	return n
}

// hasMessage matches sdk-bob's report of a message whose payload field n
// is n.
func hasMessage(n int) func(map[string]any) bool {
	return func(ev map[string]any) bool {
		p, _ := ev["payload"].(map[string]any)
		return ev["event"] == "message" && p != nil && p["n"] == float64(n)
	}
}

// sdkToAlice has sdk-bob send to alice's proxy until alice hears it
// (stamped from sdk:agent:<bob>) within half a second of one send.
func sdkToAlice(t *testing.T, f *sdkForeign, alice *Client, bob string, n0 int) int {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for n := n0; time.Now().Before(deadline); n++ {
		f.send(map[string]any{"cmd": "send", "toName": "alice", "payload": map[string]any{"n": n}})
		err := alice.in.wait(500*time.Millisecond, func() error {
			for _, m := range alice.Messages() {
				var p struct{ N int }
				if m.From == "sdk:agent:"+bob && json.Unmarshal(m.Payload, &p) == nil && p.N == n {
					return nil
				}
			}
			return fmt.Errorf("not yet")
		})
		if err == nil {
			return n
		}
	}
	t.Fatalf("sdk-bob's messages do not reach alice; foreign events: %v", f.snapshot())
	return 0
}

// aliceToSDK sends from alice to sdk:agent:<bob> until the send is
// delivered and sdk-bob reports the message.
func aliceToSDK(t *testing.T, f *sdkForeign, alice *Client, bob string, n int) {
	t.Helper()
	to := "sdk:agent:" + bob
	Eventually(t, 30*time.Second, func() error {
		res, err := alice.Send(map[string]any{"to": to, "payload": map[string]any{"n": n}})
		if err == nil && !slices.Equal(res.Delivered, []string{to}) {
			return fmt.Errorf("delivered %v queued %v", res.Delivered, res.Queued)
		}
		return err
	})
	f.wait(10*time.Second, hasMessage(n))
}

// TestMapLink_SDKForeignServer links a 3-node Concord system to the
// official SDK's MAPServer (api-key auth) with an SDK AgentConnection on
// it: the SDK agent is imported and listed, messages flow both ways
// (replies correlated although MAPServer drops meta), garbage from the
// foreign side changes nothing, the link survives a hard stop of its
// holder and a restart of the foreign server.
func TestMapLink_SDKForeignServer(t *testing.T) {
	nodeBin := requireSDK(t)
	const key = "map_sk_test_0123456789abcdef"
	f := startSDKForeign(t, nodeBin, 0, key)
	ready := f.wait(time.Second, func(ev map[string]any) bool { return ev["event"] == "listening" })
	url, bob, port := ready["url"].(string), ready["bob"].(string), int(ready["port"].(float64))

	dc1 := New(t, 3, WithSystem("dc1"))
	dc1.MapLink(t, 1, &concordv1.CreateMapLinkRequest{SystemId: "sdk", Url: url,
		Auth: &concordv1.FedMapAuth{Method: "api-key", Token: key}, Export: exportAll})
	var holder *Node
	Eventually(t, 20*time.Second, func() (err error) { holder, err = dc1.MapHolder("sdk"); return err })
	waitImported(t, dc1, "sdk", bob)
	alice := agentOn(t, dc1, nonHolder(dc1, holder), "alice", nil)

	// map/agents/list shows the SDK agent as a remote agent.
	var list struct {
		Agents []struct{ ID, Name string } `json:"agents"`
	}
	if err := alice.CallInto("map/agents/list", map[string]any{"filter": map[string]any{"systems": []string{"sdk"}}}, &list); err != nil {
		t.Fatal(Describe(err))
	}
	if len(list.Agents) != 1 || list.Agents[0].ID != "sdk:agent:"+bob || list.Agents[0].Name != "sdk-bob" {
		t.Fatalf("remote agents of sdk: %+v", list.Agents)
	}

	aliceToSDK(t, f, alice, bob, 1)
	n := sdkToAlice(t, f, alice, bob, 2)

	// Request/reply: the SDK agent answers with reply(); MAPServer drops
	// meta both ways, the link pairs the answer with alice's request.
	if _, err := alice.Send(map[string]any{"to": "sdk:agent:" + bob, "payload": map[string]any{"ask": "q1"},
		"meta": map[string]any{"expectsResponse": true, "correlationId": "c-1"}}); err != nil {
		t.Fatal(Describe(err))
	}
	if err := alice.in.wait(10*time.Second, func() error {
		for _, m := range alice.Messages() {
			var meta struct {
				CorrelationID string `json:"correlationId"`
			}
			_ = json.Unmarshal(m.Meta, &meta)
			if m.From == "sdk:agent:"+bob && meta.CorrelationID == "c-1" {
				return nil
			}
		}
		return fmt.Errorf("no answer correlated c-1")
	}); err != nil {
		t.Fatalf("%v; alice got %+v; foreign events %v", err, alice.Messages(), f.snapshot())
	}

	// Garbage from the foreign side (not JSON, a batch, no sender, a
	// sender with ':', 2 MiB, meta not an object, params not an object, a
	// request): counted and dropped; the link stays up, the directory and
	// alice's inbox are unchanged, and the next message goes through.
	got := len(alice.Messages())
	f.send(map[string]any{"cmd": "garbage"})
	f.wait(10*time.Second, func(ev map[string]any) bool { return ev["event"] == "garbage-sent" && ev["connections"].(float64) > 0 })
	Eventually(t, 10*time.Second, func() error {
		for _, st := range holder.Server().Federation().Status() {
			if st.GetInboundErrors() >= 3 && st.GetState() == "up" { // no sender, a sender with ":", meta not an object (the peer layer refuses the rest)
				return nil
			}
			return fmt.Errorf("inbound errors %d, state %s", st.GetInboundErrors(), st.GetState())
		}
		return fmt.Errorf("no link")
	})
	waitImported(t, dc1, "sdk", bob)
	n = sdkToAlice(t, f, alice, bob, n+1)
	if msgs := alice.Messages(); len(msgs) != got+1 {
		t.Fatalf("after the garbage alice has %d messages, want %d (one real one): %+v", len(msgs), got+1, msgs[got:])
	}

	// Hard stop of the holder: another node takes the link over.
	killHolder(t, dc1, holder, "sdk")
	n = sdkToAlice(t, f, alice, bob, n+1)
	// The new holder removed the proxy the dead one left behind (MAPServer
	// keeps a disconnected session's agents).
	Eventually(t, 20*time.Second, func() error {
		if got := f.proxiesNamed("alice"); got != 1 {
			return fmt.Errorf("%d proxies named alice on the foreign server", got)
		}
		return nil
	})
	aliceToSDK(t, f, alice, bob, 1000)

	// Restart of the foreign server (all its state gone): the link
	// reconnects, registers alice's proxy again and imports the new agent.
	f.kill()
	f = startSDKForeign(t, nodeBin, port, key)
	bob2 := f.wait(time.Second, func(ev map[string]any) bool { return ev["event"] == "listening" })["bob"].(string)
	waitImported(t, dc1, "sdk", bob2)
	sdkToAlice(t, f, alice, bob2, n+1)
	aliceToSDK(t, f, alice, bob2, 2000)
}
