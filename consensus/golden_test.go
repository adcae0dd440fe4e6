package consensus

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// goldenScenarios are full runs whose artifacts are pinned in testdata/.
func goldenScenarios() map[string]func() (*Request, *Script) {
	return map[string]func() (*Request, *Script){
		"worked_example": func() (*Request, *Script) {
			return mustRequest(nil, fmt.Sprintf(workedRequest, 1)), workedExample()
		},
		"timeout_elimination": func() (*Request, *Script) {
			req := mustRequest(nil, `{"requestId":"req-timeout","task":"Pick a storage engine for the audit log.",
			 "participants":[{"id":"alpha"},{"id":"beta"},{"id":"gamma","role":"skeptic"}],
			 "roundPolicy":{"minRounds":1,"maxRounds":2},
			 "waitingPolicy":{"perTaskTimeoutMs":5000,"perRoundTimeoutMs":8000},
			 "reportPolicy":{"includeDeliberationTrace":true}}`)
			s := &Script{Version: 1, Persona: true, Agents: map[string]map[string]Answer{
				"gamma": {"debate:1": {Timeout: true}},
				"beta":  {"initial": {LatencyMs: 1200, Output: out("beta", map[string]any{"taskTitle": "Audit log storage", "extractedClaims": []any{claim("Use an append-only table")}}).Output}},
			}}
			return req, s
		},
		"representative_report_action": func() (*Request, *Script) {
			req := mustRequest(nil, `{"requestId":"req-report","task":"Plan the migration of the billing service.",
			 "participants":[{"id":"ana"},{"id":"bo"},{"id":"cy"}],
			 "reportPolicy":{"composer":"representative"},
			 "actionPolicy":{"prompt":"Write the migration checklist.","includeFullResult":false}}`)
			return req, &Script{Version: 1, Persona: true}
		},
		"interrupted_invalid_output": func() (*Request, *Script) {
			req := mustRequest(nil, `{"requestId":"req-int","task":"Choose a name.",
			 "participants":[{"id":"a"},{"id":"b"}],"roundPolicy":{"minRounds":0,"maxRounds":2}}`)
			s := &Script{Version: 1, Persona: true, Agents: map[string]map[string]Answer{
				"b": {"debate:1": {Raw: []byte(`"{\"kind\":\"round\",\"output\":{\"phase\":\"initial\"}}"`)}},
			}}
			return req, s
		},
	}
}

func TestGolden_Artifacts(t *testing.T) {
	for name, mk := range goldenScenarios() {
		t.Run(name, func(t *testing.T) {
			req, script := mk()
			run := runScript(t, req, script)
			if run.Failure != nil {
				t.Fatalf("run failed: %+v", run.Failure)
			}
			var res, ev, sum bytes.Buffer
			if err := WriteResultJSON(&res, run.Result); err != nil {
				t.Fatal(err)
			}
			if err := WriteEventsJSONL(&ev, run.Events); err != nil {
				t.Fatal(err)
			}
			WriteSummary(&sum, run.Result)
			for file, got := range map[string][]byte{"result.json": res.Bytes(), "events.jsonl": ev.Bytes(), "summary.md": sum.Bytes()} {
				path := filepath.Join("testdata", "golden", name, file)
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("read golden (run with -update to create): %v", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from golden %s (run with -update after checking the change)", file, path)
				}
			}
		})
	}
}
