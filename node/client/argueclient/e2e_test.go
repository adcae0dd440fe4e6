package argueclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/agentbridge"
	"github.com/concordmap/concord/node/client/argueclient"
	"github.com/concordmap/concord/node/client/mapclient"
	"github.com/concordmap/concord/node/internal/tcpproxy"
	"github.com/concordmap/concord/node/internal/testlog"
)

const runsExtensionURI = "urn:map:ext:x-concord-runs:1"

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func clientConfig(t *testing.T, urls ...string) mapclient.Config {
	cfg := mapclient.DefaultConfig()
	cfg.URLs = urls
	cfg.AttemptTimeout = 2 * time.Second
	cfg.MinBackoff, cfg.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	cfg.ReconnectTimeout = 10 * time.Second
	cfg.Logger = testLogger(t)
	return cfg
}

// startRunsNode starts a dev node and checks that it serves the runs
// extension.
func startRunsNode(t *testing.T) *node.Server {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = testLogger(t)
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	c, err := mapclient.Dial(ctx, clientConfig(t, srv.MAPURL()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer func() { _ = c.Close(ctx) }()
	var caps struct {
		Extensions []struct {
			URI string `json:"uri"`
		} `json:"extensions"`
	}
	_ = json.Unmarshal(c.Session().Capabilities, &caps)
	for _, e := range caps.Extensions {
		if e.URI == runsExtensionURI {
			return srv
		}
	}
	t.Fatalf("the node does not advertise %s: %s", runsExtensionURI, c.Session().Capabilities)
	return nil
}

// startAgents runs one bridge per id until the test ends.
func startAgents(t *testing.T, srv *node.Server, handlers map[string]agentbridge.Handler, urls ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for id, h := range handlers {
		cfg := agentbridge.DefaultConfig()
		cfg.AgentID, cfg.Handler, cfg.Logger = id, h, testLogger(t)
		cfg.ReplyTimeout = 3 * time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := agentbridge.Serve(ctx, cfg, clientConfig(t, urls...), 0); err != nil {
				t.Errorf("agent %s: %v", id, err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for id := range handlers {
		for {
			if _, ok := srv.Registry().Agent(id); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s never registered", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func personas(t *testing.T, ids ...string) map[string]agentbridge.Handler {
	h, err := agentbridge.NewPersonaHandler("default")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]agentbridge.Handler{}
	for _, id := range ids {
		out[id] = h
	}
	return out
}

func remote(t *testing.T, out io.Writer, dir string, urls ...string) argueclient.Remote {
	fc := argueclient.DefaultFollowConfig()
	fc.PollInterval = 200 * time.Millisecond
	r := argueclient.Remote{Client: clientConfig(t, urls...), Follow: fc, OutDir: dir}
	if out != nil {
		r.Progress = argueclient.NewProgress(out)
	}
	return r
}

// TestRemoteRun_PersonaAgents is `argue run` against a real node with three
// `agent --persona` bridges: live progress, the three files, and the same
// debate outcome as the in-process engine for the same request.
func TestRemoteRun_PersonaAgents(t *testing.T) {
	srv := startRunsNode(t)
	ids := []string{"alice", "bob", "carol"}
	startAgents(t, srv, personas(t, ids...), srv.MAPURL())
	spec := argueclient.RequestSpec{RequestID: "req-remote", Task: "Should the cache be <sharded> & replicated?", Agents: ids}
	raw, req, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	oc, err := remote(t, &progress, dir, srv.MAPURL()).Run(ctx, raw, req.RequestID)
	if err != nil {
		t.Fatalf("remote run: %v\n%s", err, progress.String())
	}
	if oc.Status != argueclient.StatusFinished || oc.Dir != filepath.Join(dir, "req-remote") {
		t.Fatalf("outcome %+v", oc)
	}
	for _, name := range []string{"events.jsonl", "result.json", "summary.md"} {
		if b, err := os.ReadFile(filepath.Join(oc.Dir, name)); err != nil || len(b) == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	text := progress.String()
	for _, frag := range []string{"started (request req-remote)", "round 0 (initial): dispatched to alice, bob, carol",
		"bob responded: 2 new claims", "consensus drafted", "finished: status"} {
		if !strings.Contains(text, frag) {
			t.Errorf("progress lacks %q:\n%s", frag, text)
		}
	}

	local, err := consensus.Simulate(context.Background(), req, consensus.AgentMap{
		"alice": consensus.Persona{}.Agent(), "bob": consensus.Persona{}.Agent(), "carol": consensus.Persona{}.Agent()},
		consensus.SimOptions{StartMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, want := oc.Result, local.Result
	if got.Status != want.Status || got.Representative.ParticipantID != want.Representative.ParticipantID ||
		len(got.FinalClaims) != len(want.FinalClaims) || len(got.ClaimResolutions) != len(want.ClaimResolutions) ||
		len(got.Rounds) != len(want.Rounds) {
		t.Fatalf("cluster result (%s, %s, %d claims, %d rounds) differs from local (%s, %s, %d claims, %d rounds)",
			got.Status, got.Representative.ParticipantID, len(got.FinalClaims), len(got.Rounds),
			want.Status, want.Representative.ParticipantID, len(want.FinalClaims), len(want.Rounds))
	}
	for i := range got.ClaimResolutions {
		if got.ClaimResolutions[i].Status != want.ClaimResolutions[i].Status {
			t.Fatalf("claim %d resolution %s, local %s", i, got.ClaimResolutions[i].Status, want.ClaimResolutions[i].Status)
		}
	}
	evLines := bytes.Count(mustRead(t, filepath.Join(oc.Dir, "events.jsonl")), []byte("\n"))
	if evLines != len(local.Events) {
		t.Fatalf("events.jsonl has %d events, a local run %d", evLines, len(local.Events))
	}

	// get, list, watch of the finished run; cancel is refused.
	c, err := mapclient.Dial(ctx, clientConfig(t, srv.MAPURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	runs := argueclient.Runs{C: c}
	info, err := runs.Get(ctx, oc.RunID, "result")
	if err != nil || info.Status != argueclient.StatusFinished || len(info.Result) == 0 {
		t.Fatalf("get: %+v, %v", info, err)
	}
	list, _, err := runs.List(ctx, argueclient.StatusFinished, 10, "")
	if err != nil || len(list) != 1 || list[0].RunID != oc.RunID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	var buf bytes.Buffer
	if err := argueclient.WriteRunList(&buf, list, ""); err != nil || !strings.Contains(buf.String(), oc.RunID) {
		t.Fatalf("list output %q, %v", buf.String(), err)
	}
	if _, err := runs.Cancel(ctx, oc.RunID, "too late"); !argueclient.IsRunFinished(err) {
		t.Fatalf("cancel of a finished run: %v", err)
	}
	if _, err := runs.Get(ctx, "01NOSUCHRUN0000000000000000"); !argueclient.IsRunNotFound(err) {
		t.Fatalf("get of an unknown run: %v", err)
	}
	var watched bytes.Buffer
	woc, err := remote(t, &watched, "", srv.MAPURL()).Watch(ctx, oc.RunID)
	if err != nil || woc.Status != argueclient.StatusFinished || !strings.Contains(watched.String(), "finished: status") {
		t.Fatalf("watch: %+v, %v\n%s", woc, err, watched.String())
	}
}

// TestRemoteRun_Cancel cancels a run whose third agent hangs; the follower
// reports it cancelled.
func TestRemoteRun_Cancel(t *testing.T) {
	srv := startRunsNode(t)
	hs := personas(t, "alice", "bob")
	ec := agentbridge.DefaultExecConfig()
	ec.Command = "sleep 60"
	hang, err := agentbridge.NewExecHandler(ec)
	if err != nil {
		t.Fatal(err)
	}
	hs["slow"] = hang
	startAgents(t, srv, hs, srv.MAPURL())
	spec := argueclient.RequestSpec{RequestID: "req-cancel", Task: "t", Agents: []string{"alice", "bob", "slow"}}
	raw, req, err := spec.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := mapclient.Dial(ctx, clientConfig(t, srv.MAPURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	runs := argueclient.Runs{C: c}
	st, err := runs.Start(ctx, raw, req.RequestID)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	done := make(chan struct{})
	var oc *argueclient.Outcome
	var werr error
	go func() {
		defer close(done)
		oc, werr = remote(t, nil, t.TempDir(), srv.MAPURL()).Watch(ctx, st.RunID)
	}()
	if _, err := runs.Cancel(ctx, st.RunID, "operator said so"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	<-done
	if !errors.Is(werr, argueclient.ErrRunCancelled) || oc == nil || oc.Status != argueclient.StatusCancelled {
		t.Fatalf("watch after cancel: %+v, %v", oc, werr)
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// slowPersona answers like the persona after a pause, so that a run lasts
// long enough to cut connections in the middle of it.
func slowPersona(t *testing.T, d time.Duration) agentbridge.Handler {
	h, err := agentbridge.NewPersonaHandler("default")
	if err != nil {
		t.Fatal(err)
	}
	return agentbridge.HandlerFunc(func(ctx context.Context, task *agentbridge.Task) (json.RawMessage, error) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return h.Handle(ctx, task)
	})
}

// TestRemoteRun_ConnectionsCutMidRun cuts the agents' and the argue
// client's connections while a run is in progress: the agents resume their
// sessions through their second URL (staying registered, so no one is
// eliminated) and the follower catches up, rendering every event once.
func TestRemoteRun_ConnectionsCutMidRun(t *testing.T) {
	srv := startRunsNode(t)
	agentPath, clientPath := tcpproxy.Start(t, srv.HTTPAddr()), tcpproxy.Start(t, srv.HTTPAddr())
	ids := []string{"alice", "bob", "carol"}
	hs := map[string]agentbridge.Handler{}
	for _, id := range ids {
		hs[id] = slowPersona(t, 150*time.Millisecond)
	}
	startAgents(t, srv, hs, agentPath.MAPURL(), srv.MAPURL())
	sessions := map[string]string{}
	for _, id := range ids {
		a, _ := srv.Registry().Agent(id)
		sessions[id] = a.SessionID
	}
	raw, req, err := argueclient.RequestSpec{RequestID: "req-cut", Task: "t", Agents: ids}.Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress syncBuffer
	go func() {
		// Cut both paths once the first round is under way.
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(progress.String(), "dispatched to") && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		agentPath.Close()
		clientPath.Close()
	}()
	oc, err := remote(t, &progress, t.TempDir(), clientPath.MAPURL(), srv.MAPURL()).Run(ctx, raw, req.RequestID)
	if err != nil {
		t.Fatalf("remote run: %v\n%s", err, progress.String())
	}
	if oc.Status != argueclient.StatusFinished || len(oc.Result.Eliminations) != 0 {
		t.Fatalf("outcome %s, eliminations %+v\n%s", oc.Status, oc.Result.Eliminations, progress.String())
	}
	text := progress.String()
	if !strings.Contains(text, "(reconnected; catching up)") {
		t.Errorf("the follower never reconnected:\n%s", text)
	}
	if n := strings.Count(text, "round 0 (initial): dispatched"); n != 1 {
		t.Errorf("round 0 dispatch rendered %d times:\n%s", n, text)
	}
	for _, id := range ids {
		a, ok := srv.Registry().Agent(id)
		if !ok || a.SessionID != sessions[id] {
			t.Errorf("agent %s: registered %v, session %s, want the resumed session %s", id, ok, a.SessionID, sessions[id])
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
