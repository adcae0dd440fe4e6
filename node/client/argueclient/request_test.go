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
	"time"

	"github.com/concordmap/concord/consensus"
)

func TestRequestSpec_Build(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "task.json")
	if err := os.WriteFile(input, []byte(`{"requestId":"from-file","task":"file task",
		"participants":[{"id":"x","role":"critic"},{"id":"y"}],"roundPolicy":{"minRounds":1,"maxRounds":4},
		"context":{"repo":"concord"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dur := func(d time.Duration) *time.Duration { return &d }
	f64 := func(v float64) *float64 { return &v }
	tests := []struct {
		name   string
		spec   RequestSpec
		check  func(*testing.T, *consensus.Request)
		errHas string
	}{
		{"flags only", RequestSpec{Task: "t", Agents: []string{"a", "b"}}, func(t *testing.T, r *consensus.Request) {
			if !strings.HasPrefix(r.RequestID, "req-") || len(r.Participants) != 2 || r.RoundPolicy.MaxRounds != 3 {
				t.Fatalf("%+v", r)
			}
		}, ""},
		{"input file kept", RequestSpec{Input: input}, func(t *testing.T, r *consensus.Request) {
			if r.RequestID != "from-file" || r.Task != "file task" || *r.Participants[0].Role != "critic" ||
				r.RoundPolicy.MaxRounds != 4 || string(r.Context) != `{"repo":"concord"}` {
				t.Fatalf("%+v", r)
			}
		}, ""},
		{"flags override the file", RequestSpec{Input: input, Task: "flag task", MaxRounds: int64p(2), Threshold: f64(0.6),
			Composer: "representative", Representative: "y", Action: "do it", IncludeFullInAct: true,
			PerTaskTimeout: dur(90 * time.Second), PerRoundTimeout: dur(5 * time.Minute), GlobalDeadline: dur(time.Hour)},
			func(t *testing.T, r *consensus.Request) {
				w := r.WaitingPolicy
				if r.Task != "flag task" || r.RoundPolicy.MinRounds != 1 || r.RoundPolicy.MaxRounds != 2 ||
					r.ConsensusPolicy.Threshold != 0.6 || r.ReportPolicy.Composer != "representative" ||
					r.ReportPolicy.RepresentativeID != "y" || r.ActionPolicy == nil || !r.ActionPolicy.IncludeFullResult ||
					w.PerTaskTimeoutMs != 90_000 || w.PerRoundTimeoutMs != 300_000 || *w.GlobalDeadlineMs != 3_600_000 ||
					len(r.Participants) != 2 {
					t.Fatalf("%+v", r)
				}
			}, ""},
		{"agents replace participants", RequestSpec{Input: input, Agents: []string{"p", "q", "r"}}, func(t *testing.T, r *consensus.Request) {
			if len(r.Participants) != 3 || r.Participants[2].ID != "r" {
				t.Fatalf("%+v", r.Participants)
			}
		}, ""},
		{"missing task", RequestSpec{Agents: []string{"a", "b"}}, nil, "task: is required"},
		{"one agent", RequestSpec{Task: "t", Agents: []string{"a"}}, nil, "participants"},
		{"bad rounds", RequestSpec{Task: "t", Agents: []string{"a", "b"}, MinRounds: int64p(3), MaxRounds: int64p(2)}, nil, "roundPolicy.maxRounds"},
		{"bad composer", RequestSpec{Task: "t", Agents: []string{"a", "b"}, Composer: "llm"}, nil, "reportPolicy.composer"},
		{"missing input", RequestSpec{Input: filepath.Join(dir, "nope.json")}, nil, "read --input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, req, err := tt.spec.Build()
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(raw) {
				t.Fatal("raw request is not JSON")
			}
			tt.check(t, req)
		})
	}
	if _, _, err := (RequestSpec{Agents: []string{"a", "b"}}).Build(); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("validation error not ErrInvalidRequest: %v", err)
	}
}

// TestResultFile checks that a result as a server sends it (compact, Go's
// HTML escaping) becomes exactly WriteResultJSON's file, and that a result
// the decoder cannot represent keeps its data.
func TestResultFile(t *testing.T) {
	_, req, err := RequestSpec{RequestID: "r", Task: `Use <b> & "quotes"`, Agents: []string{"a", "b"}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	run, err := consensus.Simulate(context.Background(), req, personaDirectory{consensus.Persona{}.Agent()}, consensus.SimOptions{StartMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	compact, err := json.Marshal(run.Result)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := consensus.WriteResultJSON(&want, run.Result); err != nil {
		t.Fatal(err)
	}
	var decoded consensus.Result
	if err := json.Unmarshal(compact, &decoded); err != nil {
		t.Fatal(err)
	}
	got, err := resultFile(compact, &decoded)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("resultFile differs from WriteResultJSON (%v)", err)
	}

	// An empty-but-present trace list does not survive decoding: the raw
	// object is kept.
	lossy := bytes.Replace(compact, []byte(`"report":{`), []byte(`"report":{"opinionShiftTimeline":[],`), 1)
	var dl consensus.Result
	if err := json.Unmarshal(lossy, &dl); err != nil {
		t.Fatal(err)
	}
	got, err = resultFile(lossy, &dl)
	if err != nil || !sameJSON(got, lossy) {
		t.Fatalf("lossy result not kept (%v)", err)
	}
}

func TestSafeName(t *testing.T) {
	for in, want := range map[string]string{"req-1": "req-1", "a/b": "a_b", "..": "_..", "": "_", `x\y`: "x_y"} {
		if got := safeName(in); got != want {
			t.Errorf("safeName(%q) = %q, want %q", in, got, want)
		}
	}
}
