package runs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// benchRequest: 5 agents, 3 debate rounds (no early stop), builtin report.
const benchRequest = `{"requestId":"bench","task":"Benchmark the replicated engine.",
 "participants":[{"id":"p1"},{"id":"p2"},{"id":"p3"},{"id":"p4"},{"id":"p5"}],
 "roundPolicy":{"minRounds":3,"maxRounds":3},"consensusPolicy":{"threshold":0.6}}`

// benchAnswers scripts the 5 agents over `claims` claims (as consensus's
// own benchmark does): each proposes claims/5 in the initial round,
// judges 10 claims (one objection) per debate round, votes on every claim.
// It returns each agent's raw result per "<phase>:<round>".
func benchAnswers(tb testing.TB, claims int) map[string]json.RawMessage {
	ids := []string{"p1", "p2", "p3", "p4", "p5"}
	per := claims / len(ids)
	var all []string
	for _, id := range ids {
		for k := range per {
			all = append(all, fmt.Sprintf("%s:0:%d", id, k))
		}
	}
	s := &consensus.Script{Version: 1, Agents: map[string]map[string]consensus.Answer{}}
	out := map[string]json.RawMessage{}
	for pi, id := range ids {
		mk := func(v any) consensus.Answer {
			b, _ := json.Marshal(v)
			return consensus.Answer{Output: b}
		}
		var cl, votes []any
		for k := range per {
			cl = append(cl, map[string]any{"title": fmt.Sprintf("claim %d of %s", k, id),
				"statement": fmt.Sprintf("Statement %d proposed by %s for the benchmark.", k, id)})
		}
		for k, c := range all {
			vote := "accept"
			if (k+pi)%7 == 0 {
				vote = "reject"
			}
			votes = append(votes, map[string]any{"claimId": c, "vote": vote})
		}
		base := map[string]any{"fullResponse": "benchmark answer of " + id, "summary": "summary of " + id, "judgements": []any{}}
		with := func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
			for bk, bv := range base {
				if _, ok := m[bk]; !ok {
					m[bk] = bv
				}
			}
			return m
		}
		a := map[string]consensus.Answer{
			"initial:0":    mk(with("extractedClaims", cl, "taskTitle", "bench")),
			"final_vote:4": mk(with("claimVotes", votes)),
		}
		for r := 1; r <= 3; r++ {
			var js []any
			for k := range 10 {
				stance := "agree"
				if k == 0 {
					stance = "disagree"
				}
				js = append(js, map[string]any{"claimId": all[(pi*37+r*11+k*13)%len(all)], "stance": stance,
					"confidence": 0.7, "rationale": "because"})
			}
			a["debate:"+strconv.Itoa(r)] = mk(with("judgements", js))
		}
		s.Agents[id] = a
		for key := range a {
			phase, round := key[:bytes.IndexByte([]byte(key), ':')], key[bytes.IndexByte([]byte(key), ':')+1:]
			rn, _ := strconv.Atoi(round)
			agent, _ := s.Agent(id)
			raw, err := agent.Handle(context.Background(), &consensus.Task{Kind: consensus.TaskRound,
				ParticipantID: id, Phase: consensus.Phase(phase), Round: rn})
			if err != nil {
				tb.Fatal(err)
			}
			out[id+"/"+key] = raw
		}
	}
	return out
}

var (
	taskHead = regexp.MustCompile(`"participantId":"([^"]+)","phase":"([a-z_]+)","round":(\d+)`)
	taskID   = regexp.MustCompile(`"correlationId":"([^"]+)"`)
)

// benchAgents answers task messages from the script, from goroutines,
// through the reply endpoint, like agents on their own connections.
type benchAgents struct {
	svc     *Service
	answers map[string]json.RawMessage
	ctx     context.Context
	wg      sync.WaitGroup
	errs    atomic.Int64
}

func (a *benchAgents) Send(_ context.Context, _ router.Sender, params json.RawMessage) (any, error) {
	head := params[:min(len(params), 600)]
	m := taskHead.FindSubmatch(head)
	tail := params[max(0, len(params)-400):]
	id := taskID.FindSubmatch(tail)
	if m == nil || id == nil {
		a.errs.Add(1)
		return nil, fmt.Errorf("bench agent cannot read task")
	}
	answer := a.answers[string(m[1])+"/"+string(m[2])+":"+string(m[3])]
	taskID, pid := string(id[1]), string(m[1])
	a.wg.Go(func() {
		if _, err := a.svc.HandleSend(a.ctx, agentSender(pid), benchReply(taskID, answer)); err != nil && a.ctx.Err() == nil {
			a.errs.Add(1)
		}
	})
	return &router.SendResult{MessageID: "m", Delivered: []string{pid}}, nil
}

// benchReply is replyParams built with one copy of the (large) answer:
// the agents' own cost should weigh as little as possible in a figure
// about the node.
func benchReply(taskID string, payload json.RawMessage) json.RawMessage {
	const head, mid, tail = `{"to":{"agent":"` + ServiceID + `"},"payload":`, `,"meta":{"isResult":true,"correlationId":"`, `"}}`
	b := make([]byte, 0, len(head)+len(payload)+len(mid)+len(taskID)+len(tail))
	b = append(append(append(append(append(b, head...), payload...), mid...), taskID...), tail...)
	return b
}

func newBenchStore(b *testing.B, modules ...raftstore.Module) *raftstore.Store {
	cfg := raftstore.TestConfig(b, "bench", modules...)
	cfg.Logger = nil // raft's logs would dominate the profile
	return raftstore.StartTestStore(b, cfg)
}

// BenchmarkRuns measures committed engine inputs per second while whole
// runs of 5 agents and 500 claims go through the real single-node store
// (bolt log, fsync on): start through the extension method, every task
// sent by the leader's driver, every answer proposed through the reply
// endpoint (check, propose, Step in Apply, events into the registry).
// One op is one run. Beside it, in the same invocation, the raw Raft write
// rate: NOOP commands from as many concurrent proposers as there are
// agents answering at once.
func BenchmarkRuns(b *testing.B) {
	for _, runs := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("baseline_noop/proposers=%d", 5*runs), func(b *testing.B) { benchNoop(b, 5*runs) })
		b.Run(fmt.Sprintf("inputs/claims=500/concurrent_runs=%d", runs), func(b *testing.B) { benchRuns(b, 500, runs) })
	}
}

func benchNoop(b *testing.B, proposers int) {
	store := newBenchStore(b)
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := processCPU()
	for range proposers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, _, err := store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-µs/commit")
}

func benchRuns(b *testing.B, claims, concurrent int) {
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	mcfg := DefaultConfig()
	mcfg.Events = reg
	mod, err := New(mcfg)
	if err != nil {
		b.Fatal(err)
	}
	store := newBenchStore(b, reg, mod)
	ctx, cancel := context.WithCancel(context.Background())
	agents := &benchAgents{answers: benchAnswers(b, claims), ctx: ctx}
	props := &countingProposer{next: store, kinds: map[string]int{}}
	cfg := DefaultServiceConfig()
	cfg.NodeID, cfg.Module, cfg.Store, cfg.IsLeader, cfg.WaitApplied = "n1", mod, props, store.IsLeader, store.WaitApplied
	cfg.Agents = agentSet{"p1": true, "p2": true, "p3": true, "p4": true, "p5": true}
	cfg.Messenger, cfg.Leadership = agents, store
	svc, err := NewService(cfg)
	if err != nil {
		b.Fatal(err)
	}
	agents.svc = svc
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	defer func() { cancel(); <-done; agents.wg.Wait() }()

	start := svc.Methods()[MethodStart]
	cpu0 := processCPU()
	params := json.RawMessage(`{"request":` + benchRequest + `}`)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range concurrent {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				res, err := start(ctx, client, params)
				if err != nil {
					b.Error(err)
					return
				}
				id := res.(map[string]any)["runId"].(string)
				if err := waitFinished(ctx, mod, id, claims); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	inputs := props.count("start") + props.count("task_result")
	b.ReportMetric(float64(inputs)/b.Elapsed().Seconds(), "inputs/s")
	b.ReportMetric(float64(inputs)/float64(b.N), "inputs/run")
	all := props.count("start") + props.count("task_result") + props.count("task_failed") + props.count("timer_fired")
	props.mu.Lock()
	b.ReportMetric(float64(props.bytes)/float64(all), "entry-B/input")
	// Mean time from propose to applied on this node: with one run the
	// rounds are sequential, so this latency bounds the rate.
	b.ReportMetric(float64(props.lat.Microseconds())/float64(props.n), "propose-µs")
	props.mu.Unlock()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(inputs)/1e3, "cpu-µs/input")
	if n := agents.errs.Load(); n > 0 {
		b.Fatalf("%d agent errors", n)
	}
}

// waitFinished waits until the run finished with every participant
// still active and every claim in the result.
func waitFinished(ctx context.Context, mod *Module, id string, claims int) error {
	deadline := time.After(5 * time.Minute)
	for {
		ch := mod.changed()
		run, _ := mod.Get(id, Include{Result: true})
		switch run.Status {
		case StatusFinished:
			if len(run.Eliminations) > 0 || len(run.Result.FinalClaims) != claims {
				full, _ := mod.Get(id, Include{Events: true})
				for _, ev := range full.Events {
					if bytes.Contains(ev, []byte("ParticipantEliminated")) {
						return fmt.Errorf("run %s: %s", id, ev)
					}
				}
				return fmt.Errorf("run %s: eliminations %+v, %d claims", id, run.Eliminations, len(run.Result.FinalClaims))
			}
			return nil
		case StatusFailed, StatusCancelled:
			return fmt.Errorf("run %s ended %s: %+v", id, run.Status, run.Error)
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("run %s not finished", id)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// processCPU is the process's user+system CPU time in ns (both cores, the
// garbage collector included): on a shared machine it is steadier than
// wall-clock rates.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
