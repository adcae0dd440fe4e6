package raftstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var l hclog.Logger = newHCLogAdapter(base, "raft")

	l.Debug("hidden debug")
	l.Trace("hidden trace")
	l.Info("entering leader state", "leader", "n1")
	l.Named("net").With("peer", "n2").Warn("failed to contact", "error", "refused")
	l.Error("boom")

	out := buf.String()
	for _, want := range []string{
		`level=INFO msg="entering leader state" logger=raft leader=n1`,
		`level=WARN msg="failed to contact" logger=raft logger_name=raft.net peer=n2 error=refused`,
		`level=ERROR msg=boom`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("below-level messages logged:\n%s", out)
	}
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("levels: debug=%v info=%v level=%v", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	if got := l.Named("a").Named("b").Name(); got != "raft.a.b" {
		t.Errorf("name %q", got)
	}
	if args := l.With("k", 1).ImpliedArgs(); len(args) != 2 {
		t.Errorf("implied args %v", args)
	}
	l.StandardLogger(nil).Print("from std logger")
	if !strings.Contains(buf.String(), "from std logger") {
		t.Error("standard logger output missing")
	}
}
