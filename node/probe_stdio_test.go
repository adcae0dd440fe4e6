package node_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/stdio"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	"github.com/concordmap/concord/raftstore/testlog"
)

// dialStdio runs a stdio bridge (`concord stdio`) to srv in-process and
// returns a peer writing its stdin and reading its stdout.
func dialStdio(t *testing.T, srv *node.Server) *rawWS {
	t.Helper()
	cfg := stdio.DefaultConfig()
	cfg.URLs = []string{srv.MAPURL()}
	cfg.TLSConfig = tlstest.ClientTLS("dev", "")
	cfg.MaxFrameBytes = 64 << 10 // the probe node's limit
	cfg.Resume = false
	cfg.DrainTimeout = 0
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := stdio.NewBridge(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, inR, outW); _ = outW.Close() }()
	lines := make(chan []byte, 64)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(lines)
		br := bufio.NewReaderSize(outR, 256<<10)
		for {
			s, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			lines <- []byte(strings.TrimSuffix(string(s), "\n"))
		}
	}()
	w := &rawWS{t: t, srv: srv}
	w.line = func(s string) error { _, err := io.WriteString(inW, s+"\n"); return err }
	w.readLine = func() ([]byte, error) {
		select {
		case b, ok := <-lines:
			if !ok {
				return nil, errors.New("bridge stdout ended")
			}
			return b, nil
		case <-time.After(probeTimeout):
			return nil, errors.New("no line within the probe timeout")
		}
	}
	w.stop = func() {
		cancel()
		_ = inW.Close()
		go func() {
			for range lines { // unblock a pending stdout write
			}
		}()
		select {
		case <-done:
		case <-time.After(probeTimeout):
			t.Error("bridge did not stop")
		}
		<-readerDone
	}
	t.Cleanup(w.closeAndSettle)
	return w
}

// TestProbe_StdioFrames sends the WebSocket frame probes as stdin lines of
// a stdio bridge: the subprocess must get the same answers (the bridge
// answers framing errors itself, with the node's bytes).
func TestProbe_StdioFrames(t *testing.T) {
	srv := startProbeNode(t, nil)
	probes := append(frameProbes(), frameProbe{
		name: "oversized line", frame: paddedRequest("big", 64<<10+1),
		want: []wantErr{{code: -32600, id: `"big"`, category: "protocol"}},
	}, frameProbe{
		name: "blank line skipped", frame: "   ", // NDJSON framing: no message at all
	}, frameProbe{
		name: "carriage return inside the line", frame: "{\"jsonrpc\":\"2.0\",\r\"id\":1,\"method\":\"x-nope\"}",
		want: []wantErr{{code: -32601, id: "1", category: "protocol"}},
	})
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			w := dialStdio(t, srv)
			if !p.preConnect {
				w.connectAgent()
			}
			before := markState(srv)
			w.send(p.frame)
			n := len(p.want)
			if p.batch != nil {
				n = 1
			}
			checkReplies(t, w.collectUntilSentinel(n), p)
			checkUnchanged(t, srv, before)
			if p.preConnect {
				w.connectAgent()
			}
			w.mustCall("map/agents/list", map[string]any{})
		})
	}
}
