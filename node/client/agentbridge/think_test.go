package agentbridge

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestWithThinkTime(t *testing.T) {
	answer := json.RawMessage(`{"ok":true}`)
	inner := HandlerFunc(func(context.Context, *Task) (json.RawMessage, error) { return answer, nil })
	if got := WithThinkTime(inner, 0); got == nil {
		t.Fatal("zero think time must return the handler")
	}
	h := WithThinkTime(inner, 30*time.Millisecond)
	start := time.Now()
	out, err := h.Handle(context.Background(), &Task{})
	if err != nil || string(out) != string(answer) {
		t.Fatalf("answer %s, %v", out, err)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Fatalf("answered after %v, want at least the think time", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := WithThinkTime(inner, time.Hour).Handle(ctx, &Task{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled task: %v", err)
	}
}
