package clustertest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/concordmap/concord/node/rpc"
)

// The linearizability check: concurrent system clients on different nodes
// register, unregister and read (with _meta.consistency "linearizable") a
// small set of agent ids while the harness injects faults; porcupine then
// checks the history against a model where each id is present or absent.

type regOp string

const (
	opRegister   regOp = "register"
	opUnregister regOp = "unregister"
	opGet        regOp = "get"
)

type regInput struct {
	Op  regOp
	Key string
}

// regOutput: "ok", "exists" (3000: owned by another live session),
// "notfound" (2001) or "unknown" (the write may or may not have taken
// effect).
type regOutput string

// registryModel is nondeterministic only for writes of unknown outcome,
// which may or may not have happened; their return time is the end of the
// history, so porcupine may place them anywhere after their call.
var registryModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{false} },
	Step: func(state, input, output any) []any {
		present := state.(bool)
		in, out := input.(regInput), output.(regOutput)
		switch in.Op {
		case opRegister:
			// Registering an id that exists succeeds when the caller
			// already owns it or it is orphaned (node/registry
			// registerExisting), so "ok" does not tell whether it existed.
			switch {
			case out == "ok", out == "exists" && present, out == "unknown" && present:
				return []any{true}
			case out == "unknown":
				return []any{true, false}
			}
		case opUnregister:
			switch {
			case out == "ok" && present, out == "notfound" && !present, out == "unknown" && !present:
				return []any{false}
			case out == "unknown":
				return []any{true, false}
			}
		case opGet:
			if (out == "ok") == present && (out == "ok" || out == "notfound") {
				return []any{present}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		return fmt.Sprintf("%s(%s) -> %s", in.Op, in.Key, output.(regOutput))
	},
}

// linWorkload runs clients against the cluster and records their history.
type linWorkload struct {
	c     *Cluster
	keys  []string
	start time.Time

	mu      sync.Mutex
	history []porcupine.Operation
	errs    []string
	stats   map[string]int
}

func newLinWorkload(c *Cluster, keys int) *linWorkload {
	w := &linWorkload{c: c, start: time.Now(), stats: map[string]int{}}
	for k := range keys {
		w.keys = append(w.keys, fmt.Sprintf("lin-%d", k))
	}
	return w
}

// run starts one client per entry of homes (a node index each) and
// returns a function that stops them and waits.
func (w *linWorkload) run(t *testing.T, homes []int) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for id, home := range homes {
		wg.Go(func() { w.client(t, id, home, quit) })
	}
	return func() {
		close(quit)
		wg.Wait()
	}
}

func (w *linWorkload) now() int64 { return int64(time.Since(w.start)) }

// client is one sequential MAP client: it issues random operations until
// quit, and when its node goes away it reconnects to the next one.
func (w *linWorkload) client(t *testing.T, id, home int, quit <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(w.start.UnixNano())))
	var cl *Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	for node := home; ; {
		select {
		case <-quit:
			return
		default:
		}
		if cl == nil || isDone(cl) {
			if cl != nil {
				cl.Close()
			}
			cl = w.connect(t, node)
			node = (node + 1) % len(w.c.Nodes())
			if cl == nil {
				time.Sleep(50 * time.Millisecond) // the node is down; try the next one soon
				continue
			}
		}
		w.step(id, cl, rng)
	}
}

func isDone(cl *Client) bool {
	select {
	case <-cl.Done():
		return true
	default:
		return false
	}
}

// connect opens a system session on node i, or returns nil.
func (w *linWorkload) connect(t *testing.T, i int) *Client {
	n := w.c.Node(i)
	if n.State() != NodeRunning {
		return nil
	}
	cl, err := Dial(t, n.MAPURL(), w.c.Ledger)
	if err != nil {
		return nil
	}
	cl.SetToken(w.c.Token())
	if _, err := cl.Connect(map[string]any{
		"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"},
	}); err != nil {
		cl.Close()
		return nil
	}
	return cl
}

// step performs one random operation and records it.
func (w *linWorkload) step(id int, cl *Client, rng *rand.Rand) {
	in := regInput{Key: w.keys[rng.IntN(len(w.keys))]}
	switch r := rng.IntN(10); {
	case r < 3:
		in.Op = opRegister
	case r < 6:
		in.Op = opUnregister
	default:
		in.Op = opGet
	}
	call := w.now()
	var err error
	switch in.Op {
	case opRegister:
		err = cl.Register(in.Key, nil)
	case opUnregister:
		err = cl.Unregister(in.Key)
	case opGet:
		_, err = cl.Call("map/agents/get", map[string]any{"agentId": in.Key, "_meta": map[string]any{"consistency": "linearizable"}})
	}
	ret := w.now()
	out, ok := w.classify(in, err)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats[fmt.Sprintf("%s %s", in.Op, out)]++
	if !ok {
		return
	}
	if out == "unknown" {
		ret = math.MaxInt64 // it may take effect at any time after its call
	}
	w.history = append(w.history, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
}

// classify maps a result to the model's output; ok=false drops the
// operation (a read that failed observed nothing). Unexpected definite
// errors are recorded as test errors.
func (w *linWorkload) classify(in regInput, err error) (regOutput, bool) {
	switch {
	case err == nil:
		return "ok", true
	case rpc.IsCode(err, rpc.CodeAgentExists) && in.Op == opRegister:
		return "exists", true
	case rpc.IsCode(err, rpc.CodeAgentNotFound) && in.Op != opRegister:
		return "notfound", true
	case in.Op == opGet:
		return "failed", false
	case OutcomeOf(err) == Unknown:
		return "unknown", true
	}
	w.mu.Lock()
	w.errs = append(w.errs, fmt.Sprintf("%s(%s): unexpected %s", in.Op, in.Key, Describe(err)))
	w.mu.Unlock()
	return "failed", false
}

// check runs porcupine over the history, writing a visualisation next to
// the test's temp files when it is not linearizable.
func (w *linWorkload) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	history, errs, stats := w.history, w.errs, w.stats
	w.mu.Unlock()
	t.Logf("linearizability: %d operations recorded, outcomes %v", len(history), stats)
	for _, e := range errs {
		t.Errorf("linearizability workload: %s", e)
	}
	if len(history) == 0 {
		t.Fatal("linearizability: no operations recorded")
	}
	model := registryModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, history, scaled(60*time.Second))
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("linearizability check timed out on %d operations", len(history))
	default:
		// Outside t.TempDir, which is deleted when the test ends.
		if dir, err := os.MkdirTemp("", "concord-lincheck-"); err == nil {
			path := filepath.Join(dir, "linearizability.html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				t.Logf("visualisation of the failing history: %s", path)
			}
		}
		t.Errorf("history is not linearizable (%d operations)", len(history))
	}
}

// TestRegistryModel checks the model itself on hand-made histories, so a
// passing porcupine run means something.
func TestRegistryModel(t *testing.T) {
	op := func(client int, o regOp, out regOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: regInput{Op: o, Key: "k"}, Output: out, Call: call, Return: ret}
	}
	tests := []struct {
		name    string
		history []porcupine.Operation
		want    bool
	}{
		{"register then read", []porcupine.Operation{op(0, opRegister, "ok", 0, 1), op(1, opGet, "ok", 2, 3)}, true},
		{"acknowledged register lost", []porcupine.Operation{op(0, opRegister, "ok", 0, 1), op(1, opGet, "notfound", 2, 3)}, false},
		{"read before write", []porcupine.Operation{op(1, opGet, "ok", 0, 1), op(0, opRegister, "ok", 2, 3)}, false},
		{"concurrent read may miss", []porcupine.Operation{op(0, opRegister, "ok", 0, 3), op(1, opGet, "notfound", 1, 2)}, true},
		{"unknown register may apply", []porcupine.Operation{op(0, opRegister, "unknown", 0, math.MaxInt64), op(1, opGet, "ok", 2, 3)}, true},
		{"unknown register may not apply", []porcupine.Operation{op(0, opRegister, "unknown", 0, math.MaxInt64), op(1, opGet, "notfound", 2, 3)}, true},
		{"unregister of absent", []porcupine.Operation{op(0, opUnregister, "ok", 0, 1)}, false},
		{"exists needs presence", []porcupine.Operation{op(0, opRegister, "exists", 0, 1)}, false},
		{"stale read after unregister", []porcupine.Operation{
			op(0, opRegister, "ok", 0, 1), op(0, opUnregister, "ok", 2, 3), op(1, opGet, "ok", 4, 5),
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(registryModel.ToModel(), tt.history); got != tt.want {
				t.Fatalf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}
