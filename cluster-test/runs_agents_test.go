package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/agentbridge"
	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/raftstore/testlog"
)

// Agents of the replicated-run scenarios (issue 5): real agentbridge
// bridges on real mapclient connections, the same code `concord agent`
// runs, each connected first to a node of its own and failing over to the
// others with its resume token.

// runAgentThink is the scripted agents' think time: long enough that a
// round is in progress for a while, short enough to keep a run under a
// few seconds.
const runAgentThink = 60 * time.Millisecond

// runAgent is one agent of a scenario. It records every task message it
// receives, before the bridge sees it, so that tasks re-sent by a new
// leader (which the bridge ignores or answers from its cache) are counted
// too, and every reconnect of its connection.
type runAgent struct {
	id     string
	client *mapclient.Client
	bridge *agentbridge.Bridge

	mu         sync.Mutex
	received   []taskNote
	reconnects []mapclient.ReconnectInfo
}

// taskNote is one task message as an agent received it.
type taskNote struct {
	taskID string
	at     time.Time
}

// runLogger writes a component's warnings to the test output: agents and
// clients log their failovers there, which explains a failed scenario.
func runLogger(t testing.TB, who string) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelInfo})).With("who", who)
}

// runClientConfig is a mapclient config over urls: the production timings
// `concord agent` and `concord argue` use (attempt timeout, first backoff),
// with the backoff capped at a second so that a scenario does not idle
// for long after a fault.
func runClientConfig(t testing.TB, who string, urls []string) mapclient.Config {
	cfg := mapclient.DefaultConfig()
	cfg.URLs = urls
	cfg.RPC.TLSConfig = ClientTLS()
	cfg.MaxBackoff = time.Second
	cfg.ReconnectTimeout = ConvergeTimeout
	cfg.Logger = runLogger(t, who)
	return cfg
}

// nodeURLs lists every node's MAP URL, node first first: a client's home
// node and then the failover order.
func nodeURLs(c *Cluster, first int) []string {
	nodes := c.Nodes()
	urls := make([]string, 0, len(nodes))
	for k := range nodes {
		urls = append(urls, nodes[(first+k)%len(nodes)].MAPURL())
	}
	return urls
}

// startRunAgent connects agent id through urls (the first is its home)
// and serves tasks with h until the test ends. It returns once the agent's
// registration is acknowledged (committed).
func startRunAgent(t testing.TB, id string, urls []string, h agentbridge.Handler) *runAgent {
	t.Helper()
	a := &runAgent{id: id}
	bcfg := agentbridge.DefaultConfig()
	bcfg.AgentID, bcfg.Name, bcfg.Handler = id, id, h
	// The engine's task timers decide when a task is abandoned; the bridge
	// must not give up first (it would answer with an error payload).
	bcfg.TaskTimeout = 10 * time.Minute
	bcfg.ReplyTimeout = 5 * time.Second
	bcfg.Logger = runLogger(t, "agent "+id)
	br, err := agentbridge.New(bcfg)
	if err != nil {
		t.Fatalf("bridge %s: %v", id, err)
	}
	a.bridge = br
	ccfg := runClientConfig(t, "agent "+id, urls)
	ccfg.ParticipantType, ccfg.ParticipantID, ccfg.Name = mapclient.TypeAgent, id, id
	ccfg.DisconnectPolicy = &mapclient.DisconnectPolicy{AgentBehavior: "grace-period", GracePeriodMs: time.Minute.Milliseconds()}
	ccfg.OnMessage = func(m mapclient.Message) {
		a.note(m)
		br.Deliver(m)
	}
	ccfg.OnReconnect = func(ri mapclient.ReconnectInfo) {
		a.mu.Lock()
		a.reconnects = append(a.reconnects, ri)
		a.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	cl, err := mapclient.Dial(ctx, ccfg)
	if err != nil {
		t.Fatalf("agent %s: dial %v: %v", id, urls, err)
	}
	a.client = cl
	reg := &registeringClient{Client: cl, done: make(chan struct{})}
	runCtx, stop := context.WithCancel(context.Background())
	// ran is closed when Run returns (runErr set): the cleanup and the
	// registration wait below may both wait for it.
	ran := make(chan struct{})
	var runErr error
	go func() { runErr = br.Run(runCtx, reg); close(ran) }()
	t.Cleanup(func() {
		stop()
		if <-ran; runErr != nil {
			t.Logf("agent %s stopped: %v", id, runErr)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = cl.Close(cctx)
	})
	select {
	case <-reg.done:
	case <-ran:
		t.Fatalf("agent %s: %v", id, runErr)
	case <-time.After(CallTimeout):
		t.Fatalf("agent %s: not registered after %v", id, CallTimeout)
	}
	return a
}

// registeringClient tells when the bridge's registration was acknowledged.
type registeringClient struct {
	*mapclient.Client
	once sync.Once
	done chan struct{}
}

func (r *registeringClient) RegisterAgent(ctx context.Context, spec mapclient.AgentSpec) (json.RawMessage, error) {
	res, err := r.Client.RegisterAgent(ctx, spec)
	if err == nil {
		r.once.Do(func() { close(r.done) })
	}
	return res, err
}

func (a *runAgent) note(m mapclient.Message) {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(m.Payload, &p) != nil || p.Type != agentbridge.TaskMessageType {
		return
	}
	a.mu.Lock()
	a.received = append(a.received, taskNote{taskID: m.Meta.CorrelationID, at: time.Now()})
	a.mu.Unlock()
}

// receivedSince returns the task messages received after t0.
func (a *runAgent) receivedSince(t0 time.Time) []taskNote {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []taskNote
	for _, n := range a.received {
		if n.at.After(t0) {
			out = append(out, n)
		}
	}
	return out
}

// reconnected returns the reconnects of the agent's connection so far.
func (a *runAgent) reconnected() []mapclient.ReconnectInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]mapclient.ReconnectInfo(nil), a.reconnects...)
}

// startRunAgents starts one agent per id, agent k homed on node
// homes[k] (its first URL) and failing over to the other nodes.
func startRunAgents(t testing.TB, c *Cluster, ids []string, homes []int, h agentbridge.Handler) map[string]*runAgent {
	t.Helper()
	out := map[string]*runAgent{}
	for k, id := range ids {
		out[id] = startRunAgent(t, id, nodeURLs(c, homes[k]), h)
	}
	requireAgentsEverywhere(t, c, ids...)
	return out
}

// requireAgentsEverywhere waits until every running node's replica knows
// the agents, so that a start on any node finds them.
func requireAgentsEverywhere(t testing.TB, c *Cluster, ids ...string) {
	t.Helper()
	Eventually(t, ConvergeTimeout, func() error {
		for _, n := range c.Running() {
			srv := n.Server()
			if srv == nil {
				return fmt.Errorf("%s is down", n)
			}
			for _, id := range ids {
				if _, ok := srv.Registry().Agent(id); !ok {
					return fmt.Errorf("%s does not know agent %s yet", n, id)
				}
			}
		}
		return nil
	})
}

// scriptAgents answers with the script after the think time, through the
// gate.
func scriptAgents(s *consensus.Script, g *phaseGate) agentbridge.Handler {
	return g.wrap(agentbridge.WithThinkTime(agentbridge.NewScriptHandler(s), runAgentThink))
}

// phaseGate holds the agents' tasks of one phase until the test opens it,
// so that a fault lands while that phase's tasks are outstanding (the
// engine waits for them), whatever the machine's speed.
type phaseGate struct {
	mu      sync.Mutex
	phase   string // "" = nothing is held
	arrived chan string
	release chan struct{}
}

// taskPhase is the phase a task belongs to: its round phase, or its kind
// for report and action tasks.
func taskPhase(t *agentbridge.Task) string {
	if t.Kind == consensus.TaskRound {
		return string(t.Phase)
	}
	return string(t.Kind)
}

// arm makes the gate hold every task of phase from now on, releasing
// what it held so far.
func (g *phaseGate) arm(phase string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.phase != "" {
		close(g.release)
	}
	g.phase, g.arrived, g.release = phase, make(chan string, 64), make(chan struct{})
}

// open lets every held and future task through.
func (g *phaseGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.phase != "" {
		close(g.release)
		g.phase = ""
	}
}

// waitHeld waits until n distinct tasks are held and returns their ids.
func (g *phaseGate) waitHeld(t testing.TB, n int) []string {
	t.Helper()
	g.mu.Lock()
	arrived, phase := g.arrived, g.phase
	g.mu.Unlock()
	seen := map[string]bool{}
	var ids []string
	timeout := time.After(DeliveryTimeout)
	for len(ids) < n {
		select {
		case id := <-arrived:
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		case <-timeout:
			t.Fatalf("gate %s: %d of %d tasks arrived after %v: %v", phase, len(ids), n, DeliveryTimeout, ids)
		}
	}
	return ids
}

func (g *phaseGate) wrap(h agentbridge.Handler) agentbridge.Handler {
	return agentbridge.HandlerFunc(func(ctx context.Context, task *agentbridge.Task) (json.RawMessage, error) {
		g.mu.Lock()
		phase, arrived, release := g.phase, g.arrived, g.release
		g.mu.Unlock()
		if phase != "" && taskPhase(task) == phase {
			select {
			case arrived <- task.ID:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return h.Handle(ctx, task)
	})
}

// requireResent waits until the agent of every task in held has received
// that task again after since: what a new leader's driver does for every
// outstanding task (re-sending, and retrying the sends an agent that is
// still failing over cannot take yet).
func requireResent(t testing.TB, agents map[string]*runAgent, held []string, since time.Time) {
	t.Helper()
	Eventually(t, DeliveryTimeout, func() error {
		for _, id := range held {
			a := agents[id[strings.LastIndexByte(id, '/')+1:]]
			if a == nil {
				return Permanent(fmt.Errorf("task %s: no agent", id))
			}
			got := false
			for _, n := range a.receivedSince(since) {
				got = got || n.taskID == id
			}
			if !got {
				return fmt.Errorf("agent %s has not received task %s again", a.id, id)
			}
		}
		return nil
	})
}
