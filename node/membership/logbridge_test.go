package membership

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
)

func TestParseMemberlistLine(t *testing.T) {
	tests := []struct {
		in    string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4:5", slog.LevelDebug, "Stream connection from=1.2.3.4:5"},
		{"[INFO] memberlist: Marking n1 as failed", slog.LevelInfo, "Marking n1 as failed"},
		{"[WARN] memberlist: Refuting a suspect message", slog.LevelWarn, "Refuting a suspect message"},
		{"[ERR] memberlist: Failed to send gossip", slog.LevelError, "Failed to send gossip"},
		{"[ERROR] memberlist: boom", slog.LevelError, "boom"},
		{"[ERR] Failed to shutdown transport", slog.LevelError, "Failed to shutdown transport"},
		{"no prefix at all", slog.LevelInfo, "no prefix at all"},
		{"[WARN] memberlist: ignoring alive message for 'x': bad", slog.LevelDebug, "ignoring alive message for 'x': bad"},
	}
	for _, tc := range tests {
		level, msg := parseMemberlistLine(tc.in)
		if level != tc.level || msg != tc.msg {
			t.Errorf("parse(%q) = %v %q, want %v %q", tc.in, level, msg, tc.level, tc.msg)
		}
	}
}

func TestMemberlistLogger_MapsLevels(t *testing.T) {
	var buf bytes.Buffer
	h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})
	l := newMemberlistLogger(slog.New(h).With("component", "memberlist"), new(atomic.Bool))
	l.Printf("[DEBUG] memberlist: chatty %d", 1)
	l.Printf("[WARN] memberlist: something odd")
	out := buf.String()
	if strings.Contains(out, "chatty") {
		t.Fatalf("debug line passed an info-level handler: %s", out)
	}
	if !strings.Contains(out, `level=WARN msg="something odd" component=memberlist`) {
		t.Fatalf("warn line not re-levelled and stripped: %s", out)
	}
}
