package argueclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/consensus/local"
	"github.com/concordmap/concord/node/client/mapclient"
)

// fakeRuns serves x-concord/runs/get from a finished local run, showing
// only the first `visible` events (and status running) until told more.
type fakeRuns struct {
	mu      sync.Mutex
	run     *consensus.Outcome
	runID   string
	visible int
	gets    int
	// firstGet, when set, is closed by the first Get.
	firstGet chan struct{}
}

func (f *fakeRuns) setVisible(n int) { f.mu.Lock(); f.visible = n; f.mu.Unlock() }

func (f *fakeRuns) Call(_ context.Context, method string, params any) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if method != MethodGet {
		return nil, fmt.Errorf("unexpected %s", method)
	}
	f.gets++
	if f.gets == 1 && f.firstGet != nil {
		close(f.firstGet)
	}
	p := params.(map[string]any)
	inc := map[string]bool{}
	if l, ok := p["include"].([]string); ok {
		for _, s := range l {
			inc[s] = true
		}
	}
	done := f.visible >= len(f.run.Events)
	run := map[string]any{"runId": f.runID, "requestId": f.run.Result.RequestID, "status": "running",
		"phase": "debate", "round": 1, "participants": []string{"a", "b", "c"}, "activeParticipants": []string{"a", "b", "c"},
		"eliminations": []any{}, "startedAt": 1}
	if done {
		run["status"], run["finishedAt"] = "finished", 2
		if inc["result"] {
			run["result"] = f.run.Result
		}
	}
	if inc["events"] {
		run["events"] = f.run.Events[:f.visible] // consensus.Event encodes as the engine envelope
	}
	return json.Marshal(map[string]any{"run": run}) // like the server: compact, HTML-escaped
}

func (f *fakeRuns) CallRetry(ctx context.Context, method string, params any) (json.RawMessage, error) {
	return f.Call(ctx, method, params)
}

func localRun(t *testing.T, task string) *consensus.Outcome {
	t.Helper()
	_, req, err := RequestSpec{RequestID: "req-f", Task: task, Agents: []string{"a", "b", "c"}, Action: "go"}.Build()
	if err != nil {
		t.Fatal(err)
	}
	run, err := consensus.Simulate(context.Background(), req, personaDirectory{consensus.Persona{}.Agent()},
		consensus.SimOptions{SessionID: "RUN1", StartMs: 1_760_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// mapEvent renders an engine event as the runs module's MAP event.
func mapEvent(runID string, ev consensus.Event) mapclient.Event {
	payload, _ := json.Marshal(ev.Payload)
	data, _ := json.Marshal(map[string]any{"runId": runID, "requestId": ev.RequestID, "seq": ev.Seq, "at": ev.At,
		"payload": json.RawMessage(payload)})
	return mapclient.Event{Type: EventTypePrefix + ev.Type, Data: data, EventID: fmt.Sprint(ev.Seq)}
}

// TestFollower_LiveEventsWithGaps delivers the run's events shuffled, with
// duplicates, another run's events and some lost, and checks that every
// event is rendered once, in order, and that the files equal a local run's.
func TestFollower_LiveEventsWithGaps(t *testing.T) {
	run := localRun(t, "Use <b> & friends?")
	fr := &fakeRuns{run: run, runID: "RUN1"}
	var got bytes.Buffer
	f := NewFollower(FollowConfig{PollInterval: 50 * time.Millisecond, InboxLen: 4096}, Runs{C: fr}, NewProgress(&got))

	rng := rand.New(rand.NewPCG(1, 2))
	order := rng.Perm(len(run.Events))
	for i, idx := range order {
		if i%7 == 3 {
			continue // lost
		}
		f.OnEvent(mapEvent("RUN1", run.Events[idx]))
		if i%5 == 0 {
			f.OnEvent(mapEvent("RUN1", run.Events[idx])) // duplicate
		}
		f.OnEvent(mapEvent("OTHER", run.Events[idx]))
	}
	f.OnEvent(mapclient.Event{Type: "agent_registered", Data: json.RawMessage(`{}`)})
	go func() {
		time.Sleep(150 * time.Millisecond)
		fr.setVisible(len(run.Events)) // the poll fills the gaps
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := f.Follow(ctx, "RUN1", nil, nil)
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	var want bytes.Buffer
	p := NewProgress(&want)
	for _, ev := range run.Events {
		p.Event(ev)
	}
	if got.String() != want.String() {
		t.Fatalf("rendered\n%s\nwant\n%s", got.String(), want.String())
	}

	dir := t.TempDir()
	oc, err := info.Outcome(dir)
	if err != nil || oc.Status != StatusFinished || oc.Err() != nil {
		t.Fatalf("outcome %+v, %v", oc, err)
	}
	localDir := filepath.Join(dir, "local")
	if err := local.WriteArtifacts(localDir, run.Result, nil, run.Events); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"events.jsonl", "result.json", "summary.md"} {
		a, _ := os.ReadFile(filepath.Join(oc.Dir, name))
		b, _ := os.ReadFile(filepath.Join(localDir, name))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s from the server differs from the local writer's", name)
		}
	}
}

func TestFollower_ReconnectCatchesUp(t *testing.T) {
	run := localRun(t, "t")
	fr := &fakeRuns{run: run, runID: "RUN1", firstGet: make(chan struct{})}
	var got bytes.Buffer
	// A long poll interval: only the reconnect kick can fetch the events.
	f := NewFollower(FollowConfig{PollInterval: time.Hour, InboxLen: 16}, Runs{C: fr}, NewProgress(&got))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-fr.firstGet: // Follow's first read found no events
		case <-ctx.Done():
			return
		}
		fr.setVisible(len(run.Events))
		f.OnReconnect(mapclient.ReconnectInfo{})
	}()
	if _, err := f.Follow(ctx, "RUN1", nil, nil); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if !bytes.Contains(got.Bytes(), []byte("(reconnected; catching up)")) || !bytes.Contains(got.Bytes(), []byte("finished: status")) {
		t.Fatalf("output:\n%s", got.String())
	}
}

func TestFollower_ClientGone(t *testing.T) {
	run := localRun(t, "t")
	fr := &fakeRuns{run: run, runID: "RUN1"}
	f := NewFollower(FollowConfig{PollInterval: time.Hour, InboxLen: 16}, Runs{C: fr}, nil)
	done := make(chan struct{})
	close(done)
	_, err := f.Follow(context.Background(), "RUN1", done, func() error { return mapclient.ErrUnreachable })
	if err == nil {
		t.Fatal("Follow returned no error after the client stopped")
	}
}
