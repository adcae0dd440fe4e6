package argueclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/concordmap/concord/consensus"
)

func int64p(v int64) *int64 { return &v }

// TestRunLocal_EndToEnd runs `argue run --local` logic and checks the
// three files against what consensus.Simulate and its writers produce for
// the same request, session id and start time.
func TestRunLocal_EndToEnd(t *testing.T) {
	spec := RequestSpec{RequestID: "req-e2e", Task: "Should we ship <feature> & when?", Agents: []string{"alice", "bob", "carol"},
		MinRounds: int64p(1), MaxRounds: int64p(3), Composer: consensus.ComposerRepresentative, Action: "write the plan"}
	_, req, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var progress bytes.Buffer
	const sid, start = "01JTESTSESSION0000000000000", int64(1_750_000_000_000)
	oc, err := RunLocal(context.Background(), LocalOptions{Request: req, SessionID: sid, StartMs: start, OutDir: out,
		Progress: NewProgress(&progress)})
	if err != nil {
		t.Fatalf("RunLocal: %v", err)
	}
	if oc.Status != StatusFinished || oc.Dir != filepath.Join(out, "req-e2e") {
		t.Fatalf("outcome %+v", oc)
	}

	want, err := consensus.Simulate(context.Background(), req, personaDirectory{consensus.Persona{}.Agent()},
		consensus.SimOptions{SessionID: sid, StartMs: start})
	if err != nil {
		t.Fatal(err)
	}
	var wantResult, wantEvents, wantSummary bytes.Buffer
	if err := consensus.WriteResultJSON(&wantResult, want.Result); err != nil {
		t.Fatal(err)
	}
	if err := consensus.WriteEventsJSONL(&wantEvents, want.Events); err != nil {
		t.Fatal(err)
	}
	consensus.WriteSummary(&wantSummary, want.Result)
	for name, w := range map[string][]byte{"result.json": wantResult.Bytes(), "events.jsonl": wantEvents.Bytes(), "summary.md": wantSummary.Bytes()} {
		got, err := os.ReadFile(filepath.Join(oc.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s differs from consensus.Simulate's output", name)
		}
	}

	// One progress line per event, no ANSI codes into a buffer.
	lines := strings.Split(strings.TrimRight(progress.String(), "\n"), "\n")
	if len(lines) != len(want.Events) {
		t.Fatalf("%d progress lines for %d events:\n%s", len(lines), len(want.Events), progress.String())
	}
	text := progress.String()
	for _, frag := range []string{"session started: 3 participants", "round 0 (initial): dispatched to alice, bob, carol",
		"alice responded: 2 new claims", "early stop after round", "consensus drafted", "action completed by",
		"finished: status " + want.Result.Status + ", representative " + want.Result.Representative.ParticipantID} {
		if !strings.Contains(text, frag) {
			t.Errorf("progress lacks %q:\n%s", frag, text)
		}
	}
	if strings.Contains(text, "\x1b[") {
		t.Error("ANSI escape codes in non-terminal output")
	}
}

func TestRunLocal_ScriptFailureAndElimination(t *testing.T) {
	script, err := consensus.LoadScript(strings.NewReader(`{"version":1,"persona":true,"agents":{
		"bob":{"debate":{"error":"model unavailable"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	_, req, err := RequestSpec{RequestID: "r2", Task: "t", Agents: []string{"alice", "bob", "carol"}, MinRounds: int64p(2)}.Build()
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	oc, err := RunLocal(context.Background(), LocalOptions{Request: req, Script: script, OutDir: t.TempDir(), Progress: NewProgress(&progress)})
	if err != nil {
		t.Fatalf("RunLocal: %v", err)
	}
	if !strings.Contains(progress.String(), "bob eliminated in round 1: error (model unavailable)") {
		t.Fatalf("no elimination line:\n%s", progress.String())
	}
	if len(oc.Result.Eliminations) != 1 {
		t.Fatalf("eliminations %+v", oc.Result.Eliminations)
	}

	// Two of three fail: too few participants, minParticipants 3 with fail policy.
	script, _ = consensus.LoadScript(strings.NewReader(`{"version":1,"persona":true,"agents":{
		"bob":{"initial":{"error":"down"}}}}`))
	raw, _, err := RequestSpec{RequestID: "r3", Task: "t", Agents: []string{"alice", "bob", "carol"}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	_ = json.Unmarshal(raw, &obj)
	obj["participantsPolicy"] = map[string]any{"minParticipants": 3, "onInsufficientParticipants": "fail"}
	raw, _ = json.Marshal(obj)
	req3, err := consensus.ParseRequest(raw)
	if err != nil {
		t.Fatal(err)
	}
	oc, err = RunLocal(context.Background(), LocalOptions{Request: req3, Script: script, OutDir: t.TempDir()})
	if !errors.Is(err, ErrRunFailed) || oc == nil || oc.Status != StatusFailed {
		t.Fatalf("err %v outcome %+v, want a failed run", err, oc)
	}
	if _, serr := os.Stat(filepath.Join(oc.Dir, "result.json")); !os.IsNotExist(serr) {
		t.Fatal("result.json written for a failed run")
	}
	sum, _ := os.ReadFile(filepath.Join(oc.Dir, "summary.md"))
	if len(sum) == 0 {
		t.Fatal("no summary for a failed run")
	}
}

func TestRunLocal_Cancelled(t *testing.T) {
	_, req, err := RequestSpec{RequestID: "r4", Task: "t", Agents: []string{"a", "b"}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	oc, err := RunLocal(ctx, LocalOptions{Request: req, OutDir: t.TempDir(), WallClock: true})
	if !errors.Is(err, ErrRunCancelled) || oc.Status != StatusCancelled {
		t.Fatalf("err %v outcome %+v", err, oc)
	}
}
