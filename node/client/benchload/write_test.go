package benchload

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestUpdateParams: the hand-built params are the bytes encoding/json
// gives for the same value, for ids that need escaping too.
func TestUpdateParams(t *testing.T) {
	tests := []struct {
		id string
		n  int
	}{
		{"bench-w-01JABC-0", 0},
		{"bench-w-01JABC-63", 123456789},
		{`we"ird\id<>&`, -1},
		{"ünï", 7},
	}
	var buf []byte
	for _, tt := range tests {
		want := mustJSON(map[string]any{"agentId": tt.id, "metadata": map[string]int{"bench": tt.n}})
		buf = updateParams(buf[:0], mustJSON(tt.id), tt.n)
		if string(buf) != string(want) {
			t.Errorf("updateParams(%q, %d) = %s, want %s", tt.id, tt.n, buf, want)
		}
		if !json.Valid(buf) {
			t.Errorf("updateParams(%q, %d) is not JSON", tt.id, tt.n)
		}
	}
}

// TestCallDeadline: a call that ends in time leaves the context usable
// for the next; one that outlasts the timeout sees its context cancelled,
// and the next call gets a fresh one.
func TestCallDeadline(t *testing.T) {
	d := newCallDeadline(20 * time.Millisecond)
	defer d.stop()
	for range 3 {
		ctx := d.begin()
		if ctx.Err() != nil {
			t.Fatalf("fresh call: %v", ctx.Err())
		}
		d.end()
	}
	ctx := d.begin()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a call past its timeout was not cancelled")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("err = %v", ctx.Err())
	}
	d.end()
	next := d.begin()
	if next.Err() != nil {
		t.Fatalf("call after a timeout starts cancelled: %v", next.Err())
	}
	d.end()
}
