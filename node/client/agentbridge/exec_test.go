package agentbridge

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
)

func roundTask(id string) *Task {
	return &Task{ID: id, RunID: "run-1", Kind: consensus.TaskRound, ParticipantID: "p1",
		Phase: consensus.PhaseInitial, Round: 0,
		Raw: json.RawMessage(`{"kind":"round","participantId":"p1","phase":"initial","round":0,"prompt":"hi"}`)}
}

func execHandler(t *testing.T, command string, mod func(*ExecConfig)) *ExecHandler {
	t.Helper()
	cfg := DefaultExecConfig()
	cfg.Command = command
	cfg.WaitDelay = 500 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	h, err := NewExecHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestExecHandler(t *testing.T) {
	tests := []struct {
		name    string
		command string
		want    string // exact envelope on success
		wantErr error
		errHas  string
	}{
		{"fenced answer in prose", "cat >/dev/null; printf 'Let me think.\\n```json\\n{\"summary\":\"s\"}\\n```\\nDone.\\n'",
			`{"kind":"round","output":{"summary":"s"}}`, nil, ""},
		{"envelope kept", `echo '{"kind":"round","output":{"a":1}}'`, `{"kind":"round","output":{"a":1}}`, nil, ""},
		{"task on stdin", `cat`, `{"kind":"round","output":{"kind":"round","participantId":"p1","phase":"initial","round":0,"prompt":"hi"}}`, nil, ""},
		{"environment", `printf '{"t":"%s","r":"%s","k":"%s"}' "$CONCORD_TASK_ID" "$CONCORD_RUN_ID" "$CONCORD_TASK_KIND"`,
			`{"kind":"round","output":{"t":"task-1","r":"run-1","k":"round"}}`, nil, ""},
		{"non-zero exit", `echo partial; echo 'model overloaded' >&2; exit 3`, "", ErrCommandFailed, "exit status 3; stderr: model overloaded"},
		{"garbage", `echo 'I cannot answer that.'`, "", ErrNoJSON, "I cannot answer"},
		{"error answer", `echo '{"kind":"error","error":"refused"}'`, "", ErrBadAnswer, "refused"},
		{"wrong kind", `echo '{"kind":"report","output":{}}'`, "", ErrBadAnswer, `answer kind "report"`},
		{"missing shell command", `/nonexistent/llm-cli`, "", ErrCommandFailed, "exit status 127"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := execHandler(t, tt.command, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := h.Handle(ctx, roundTask("task-1"))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.errHas)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// TestExecHandler_TimeoutKillsProcessGroup runs a command that leaves a
// background child and hangs: past the deadline the whole group is killed
// and the handler returns promptly.
func TestExecHandler_TimeoutKillsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	h := execHandler(t, "sleep 30 & echo $! > "+pidFile+"; sleep 30", nil)
	// Long enough for the shell to start and write the child's pid on a
	// loaded machine (300 ms was within reach of a fork and exec there).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := h.Handle(ctx, roundTask("task-1"))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("handler took %s after the deadline", took)
	}
	raw, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatalf("child pid: %v", rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("background child %d survived the timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecHandler_HugeOutputCapped(t *testing.T) {
	h := execHandler(t, "head -c 50000000 /dev/zero", func(c *ExecConfig) { c.MaxOutputBytes = 1 << 20 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := h.Handle(ctx, roundTask("task-1"))
	if !errors.Is(err, ErrOutputTooLarge) {
		t.Fatalf("err = %v, want ErrOutputTooLarge", err)
	}
	// Exactly at the limit is fine.
	h = execHandler(t, `printf '{"a":"%s"}' "$(head -c 100 /dev/zero | tr '\0' x)"`, func(c *ExecConfig) { c.MaxOutputBytes = 108 })
	if _, err := h.Handle(ctx, roundTask("task-1")); err != nil {
		t.Fatalf("output at the limit: %v", err)
	}
}

func TestExecConfig_Validate(t *testing.T) {
	for name, mod := range map[string]func(*ExecConfig){
		"no command":   func(c *ExecConfig) { c.Command = " " },
		"no shell":     func(c *ExecConfig) { c.Shell = "" },
		"no output":    func(c *ExecConfig) { c.MaxOutputBytes = 0 },
		"no waitdelay": func(c *ExecConfig) { c.WaitDelay = 0 },
	} {
		cfg := DefaultExecConfig()
		cfg.Command = "true"
		mod(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}
