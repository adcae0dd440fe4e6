//go:build linux

package clustertest

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concordmap/concord/node/client/argueclient"
	"github.com/concordmap/concord/node/registry"
)

// upgradeFrom is the build a rolling upgrade starts from: the last commit
// of the previous work session (CONCORD_UPGRADE_FROM overrides it, e.g.
// with a release tag).
const upgradeFrom = "5529b9b"

// TestProcs_RollingUpgrade runs a 3-process system on the binary built
// from an earlier commit, with a writer registering agents through every
// node and a debate in flight, then upgrades the processes one by one to
// the current tree's binary (followers first, the leader last, each a
// graceful stop and a start on the same data dir). The debate finishes,
// every acknowledged write is on every node, and the upgraded system
// still takes writes.
func TestProcs_RollingUpgrade(t *testing.T) {
	from := upgradeFrom
	if v := os.Getenv("CONCORD_UPGRADE_FROM"); v != "" {
		from = v
	}
	start := time.Now()
	oldBin := ConcordBinaryAt(t, from)
	newBin := ConcordBinary(t)
	t.Logf("built %s and the current tree in %s", from, time.Since(start).Round(time.Second))
	pc := StartProcs(t, 3, WithProcBinary(oldBin))
	urls := make([]string, 0, 3)
	for _, p := range pc.Procs() {
		urls = append(urls, p.MAPURL())
	}

	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	for k, id := range runParticipants {
		startRunAgent(t, id, append(urls[k:], urls[:k]...), scriptAgents(script, gate))
	}
	obs := newRunsObserver(t, urls)
	gate.arm("debate")
	rr := newRunRequest(t, "req-upgrade", "alice", runTaskTimeoutMs)
	runID := obs.start(t, rr)
	gate.waitHeld(t, len(runParticipants))

	// The old build has no autopilot health endpoint; each upgraded
	// process serves it: proof that the binary really changed. A newer
	// starting build (CONCORD_UPGRADE_FROM) may serve it; the FSM levels
	// the processes advertise (requireFSMLevels) are the proof then.
	if from == upgradeFrom {
		requireHealthEndpoint(t, pc, 0, false)
	}
	w := startProcWriter(t, pc)
	defer w.stop()
	leader := pc.Leader(t)
	order := make([]int, 0, 3)
	for _, p := range pc.Procs() {
		if p != leader {
			order = append(order, p.Index)
		}
	}
	order = append(order, leader.Index)
	upgraded := map[int]bool{}
	for k, i := range order {
		w.waitProgress(t, 10)
		pc.Upgrade(t, i, newBin)
		upgraded[i] = true
		requireHealthEndpoint(t, pc, i, true)
		// Level-gated command fields (registry.FSMLevel) stay off until
		// the last server advertises the level: the old ones show 0.
		requireFSMLevels(t, pc, i, upgraded)
		t.Logf("upgraded %s (%d/3); %d writes acknowledged so far", pc.Proc(i), k+1, w.acked())
		if k == 0 {
			gate.open() // the debate goes on through the remaining upgrades
		}
	}
	pc.Leader(t)
	// Every node current: the leader's autopilot answers, and it has
	// recorded the FSM level every server now advertises in replicated
	// state (registry.FSMLevelSystemRecord), which the old build never
	// saw: it was proposed only once the last server was upgraded.
	Eventually(t, ConvergeTimeout, func() error {
		code, body, err := httpGet(pc.Proc(0).HTTPAddr, "/v1/operator/health")
		if err == nil && code != 200 {
			err = fmt.Errorf("/v1/operator/health %d %s", code, body)
		}
		if err != nil {
			return err
		}
		var h struct {
			SystemFSMLevel int `json:"systemFsmLevel"`
		}
		if err := json.Unmarshal(body, &h); err != nil {
			return err
		}
		if h.SystemFSMLevel != registry.FSMLevel {
			return fmt.Errorf("health reports system FSM level %d, want %d", h.SystemFSMLevel, registry.FSMLevel)
		}
		return nil
	})
	w.waitProgress(t, 10)
	acked := w.stop()

	info := obs.waitDone(t, runID)
	if info.Status != argueclient.StatusFinished {
		t.Fatalf("debate %s ended %s, want %s", runID, info.Status, argueclient.StatusFinished)
	}
	requireProcAgents(t, pc, acked)
	t.Logf("rolling upgrade from %s: %d acknowledged writes kept, debate %s, in %s", from, len(acked), info.Status, time.Since(start).Round(time.Second))
}

// requireFSMLevels checks the FSM level every process advertises in
// gossip, as process i (of the current build) lists them in /v1/members:
// registry.FSMLevel for the upgraded ones, a lower one for those on the old
// build (0 from a build before levels), so node.fsmLevel keeps the fields
// of the new level off until the last one is upgraded.
func requireFSMLevels(t *testing.T, pc *ProcCluster, i int, upgraded map[int]bool) {
	t.Helper()
	Eventually(t, ConvergeTimeout, func() error {
		code, body, err := pc.get(pc.Proc(i).HTTPAddr, "/v1/members")
		if err != nil || code != 200 {
			return fmt.Errorf("%s: /v1/members %d %s %v", pc.Proc(i), code, body, err)
		}
		type member struct {
			ID       string `json:"id"`
			Status   string `json:"status"`
			FSMLevel *int   `json:"fsmLevel"`
		}
		var out struct {
			Members []member `json:"members"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			return err
		}
		for _, p := range pc.Procs() {
			k := slices.IndexFunc(out.Members, func(m member) bool { return m.ID == p.ID })
			switch {
			case k < 0:
				return fmt.Errorf("%s does not list %s", pc.Proc(i), p)
			case out.Members[k].FSMLevel == nil:
				t.Fatalf("%s (current build) lists no fsmLevel for %s", pc.Proc(i), p)
			case out.Members[k].Status != "alive":
				return fmt.Errorf("%s lists %s %s, want alive", pc.Proc(i), p, out.Members[k].Status)
			}
			// The old build advertises a lower level (none, 0, before
			// levels existed).
			got := *out.Members[k].FSMLevel
			if upgraded[p.Index] != (got == registry.FSMLevel) || got > registry.FSMLevel {
				return fmt.Errorf("%s lists %s at FSM level %d, want %d upgraded, lower on the old build", pc.Proc(i), p, got, registry.FSMLevel)
			}
		}
		return nil
	})
}

// requireHealthEndpoint checks whether process i serves
// /v1/operator/health (the current build; while the leader runs the old
// one, a follower answers 503: the leader lacks the Operator service) or
// not (the old build: 404).
func requireHealthEndpoint(t *testing.T, pc *ProcCluster, i int, served bool) {
	t.Helper()
	Eventually(t, ConvergeTimeout, func() error {
		code, body, err := httpGet(pc.Proc(i).HTTPAddr, "/v1/operator/health")
		switch {
		case err != nil:
			return err
		case served && code == 404:
			return fmt.Errorf("%s: /v1/operator/health %d %s", pc.Proc(i), code, body)
		case !served && code != 404:
			t.Fatalf("%s on the old build answers /v1/operator/health with %d: not the old binary?", pc.Proc(i), code)
		}
		return nil
	})
}

// procWriter registers agents through the processes in turn, reconnecting
// to the next process when its connection fails, and records the ids
// whose registration was acknowledged.
type procWriter struct {
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	mu      sync.Mutex
	ids     []string
	count   atomic.Int64
	changed chan struct{}
	// pauses hands the loop, between two writes, a channel to wait on
	// until it is closed (pause).
	pauses chan chan struct{}
}

// startProcWriter writes agents up-00000, up-00001, ... through the first
// three processes in turn.
func startProcWriter(t *testing.T, pc *ProcCluster) *procWriter {
	return startProcWriterVia(t, pc, "up-", pc.Procs()[:min(3, len(pc.Procs()))]...)
}

// startProcWriterVia writes agents named prefix + a counter through the
// processes via, in turn.
func startProcWriterVia(t *testing.T, pc *ProcCluster, prefix string, via ...*Proc) *procWriter {
	w := &procWriter{done: make(chan struct{}), changed: make(chan struct{}, 1), pauses: make(chan chan struct{})}
	w.wg.Go(func() {
		var cl *Client
		defer func() {
			if cl != nil {
				cl.Close()
			}
		}()
		next := 0
		for k := 0; ; k++ {
			select {
			case <-w.done:
				return
			case resume := <-w.pauses:
				select {
				case <-resume:
				case <-w.done:
					return
				}
			default:
			}
			if cl == nil {
				p := via[next%len(via)]
				next++
				c, err := Dial(t, p.MAPURL(), pc.Ledger)
				if err == nil {
					c.SetToken(pc.token)
					_, err = c.Connect(map[string]any{"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
				}
				if err != nil {
					if c != nil {
						c.Close()
					}
					time.Sleep(50 * time.Millisecond) // the process is restarting: try the next
					continue
				}
				cl = c
			}
			id := fmt.Sprintf("%s%05d", prefix, k)
			if err := cl.Register(id, nil); err != nil {
				if !IsRetryable(err) {
					cl.Close()
					cl = nil
				}
				continue
			}
			w.mu.Lock()
			w.ids = append(w.ids, id)
			w.mu.Unlock()
			w.count.Add(1)
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	})
	return w
}

// pause waits until the writer is between two writes (none in flight)
// and holds it there, its connection open, until resume is called (or
// stop).
func (w *procWriter) pause(t *testing.T) (resume func()) {
	t.Helper()
	r := make(chan struct{})
	select {
	case w.pauses <- r:
	case <-time.After(2 * CallTimeout): // a write in flight ends within its call timeout
		t.Fatalf("the writer did not pause within %v", 2*CallTimeout)
	}
	return sync.OnceFunc(func() { close(r) })
}

func (w *procWriter) acked() int64 { return w.count.Load() }

// waitProgress waits for n more acknowledged writes.
func (w *procWriter) waitProgress(t *testing.T, n int64) {
	t.Helper()
	want := w.count.Load() + n
	Eventually(t, ConvergeTimeout, func() error {
		if got := w.count.Load(); got < want {
			return fmt.Errorf("%d writes acknowledged, waiting for %d", got, want)
		}
		return nil
	})
}

// stop ends the writer and returns the acknowledged ids.
func (w *procWriter) stop() []string {
	w.once.Do(func() { close(w.done); w.wg.Wait() })
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ids...)
}

// TestProcs_DrainCLI drains a server process with `concord operator
// drain` sent to another one (refused without --force: the voters would
// go below --min-quorum): its participant gets the reconnect hint and
// a close, resumes on a node the hint names, the drained process exits 0
// by itself, and `concord operator health` then lists the two others.
func TestProcs_DrainCLI(t *testing.T) {
	pc := StartProcs(t, 3)
	bin := ConcordBinary(t)
	op := OperatorEnv(t)
	drained, via := pc.Proc(1), pc.Proc(0)
	cl := pc.Connect(t, drained.Index, map[string]any{"participantType": "agent", "participantId": "mover"})
	// Three voters and --min-quorum 3: refused (exit 1) unless forced.
	out, err := runBin(t, bin, op, "operator", "drain", drained.ID, "--addr", via.GRPCAddr, "--timeout", "20s")
	if err == nil || !strings.Contains(out, "below --min-quorum 3") || !strings.Contains(out, "--force") {
		t.Fatalf("operator drain of a voter below --min-quorum: %v, want exit 1 naming --min-quorum 3 and --force\n%s", err, out)
	}
	out, err = runBin(t, bin, op, "operator", "drain", drained.ID, "--addr", via.GRPCAddr, "--timeout", "20s", "--force")
	if err != nil || !strings.Contains(out, "draining "+drained.ID+": 1 connections asked to reconnect") || !strings.Contains(out, "warning: ") {
		t.Fatalf("operator drain: %v\n%s", err, out)
	}
	select {
	case <-cl.Done():
	case <-time.After(CallTimeout):
		t.Fatal("the drained process did not close its connection")
	}
	hint, ok := cl.Hint()
	if !ok || len(hint.Nodes) != 2 || slices.ContainsFunc(hint.Nodes, func(n ReconnectNode) bool { return n.NodeID == drained.ID }) {
		t.Fatalf("reconnect hint %+v, want the two other nodes", hint)
	}
	s := cl.Session()
	nc, err := Dial(t, hint.Nodes[0].URL, pc.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetToken(pc.token)
	res, err := nc.Connect(map[string]any{"participantType": "agent", "participantId": "mover", "sessionId": s.SessionID, "resumeToken": s.ResumeToken})
	if err != nil || !res.Reconnected {
		t.Fatalf("resume on %s: %+v %s", hint.Nodes[0].URL, res, Describe(err))
	}
	Eventually(t, ConvergeTimeout, func() error {
		if drained.Running() {
			return fmt.Errorf("%s still running", drained)
		}
		return nil
	})
	drained.mu.Lock()
	code := drained.cmd.ProcessState.ExitCode()
	drained.mu.Unlock()
	if code != 0 {
		t.Fatalf("%s exited %d after the drain, want 0", drained, code)
	}
	Eventually(t, ConvergeTimeout, func() error {
		out, err := runBin(t, bin, op, "operator", "health", "--addr", via.GRPCAddr)
		if err != nil || strings.Contains(out, drained.ID+" ") || !strings.Contains(out, pc.Proc(2).ID) {
			return fmt.Errorf("operator health: %v\n%s", err, out)
		}
		return nil
	})
}
