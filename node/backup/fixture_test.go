package backup_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/backup"
	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/rpc"
)

// Snapshot files written by each file/stream format version are committed
// under testdata (vN.snap with vN.json, what restoring it must yield), and
// every later binary must restore them. Regenerate the current one with
//
//	go test ./node/backup -run TestFixtures -update
//
// and add a new pair (never overwrite an old one) when a format changes.
var update = flag.Bool("update", false, "rewrite the current format's fixture in testdata")

// currentFixture is the fixture -update writes: the current versions.
const currentFixture = "v1"

const tenYearsMs = int64(10 * 365 * 24 * time.Hour / time.Millisecond)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixtureState is what a fixture must restore, as JSON.
type fixtureState struct {
	Agents   json.RawMessage   `json:"agents"`
	Scopes   json.RawMessage   `json:"scopes"`
	Sessions []string          `json:"sessions"` // participant ids (not clients')
	Runs     map[string]string `json:"runs"`     // run id -> status/phase/round
}

func TestFixtures_Restore(t *testing.T) {
	if *update {
		writeFixture(t, filepath.Join("testdata", currentFixture))
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.snap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata (%v)", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".snap")
		t.Run(name, func(t *testing.T) {
			info, err := backup.Inspect(file)
			if err != nil {
				t.Fatalf("inspect: %v", err)
			}
			if info.FileVersion == 0 || info.FormatVersion == 0 || info.Index == 0 || len(info.Modules) == 0 {
				t.Fatalf("inspect = %+v", info)
			}
			raw, err := os.ReadFile(strings.TrimSuffix(file, ".snap") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var want fixtureState
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			srv := startDev(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := backup.Restore(ctx, adminConn(t, srv), file)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if res.Info.Index != info.Index {
				t.Fatalf("restored index %d, inspected %d", res.Info.Index, info.Index)
			}
			reader := dial(t, srv)
			call(t, reader, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "client"})
			got := readState(t, srv, reader, want.Runs)
			if !jsonEqual(got.Agents, want.Agents) || !jsonEqual(got.Scopes, want.Scopes) ||
				!reflect.DeepEqual(got.Sessions, want.Sessions) || !reflect.DeepEqual(got.Runs, want.Runs) {
				g, _ := json.MarshalIndent(got, "", "  ")
				t.Fatalf("restored state:\n%s\nwant\n%s", g, raw)
			}
		})
	}
}

// writeFixture builds state on a dev node (agents, a scope with members,
// sessions, a consensus run waiting for its participants), saves it and
// records what it holds.
func writeFixture(t *testing.T, base string) {
	srv := startDev(t)
	c := dial(t, srv)
	call(t, c, "map/connect", map[string]any{"protocolVersion": 1, "participantType": "agent", "name": "fixture",
		"disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	for _, id := range []string{"alice", "bob", "carol"} {
		call(t, c, "map/agents/register", map[string]any{"agentId": id, "role": "debater", "name": id})
	}
	call(t, c, "map/scopes/create", map[string]any{"scopeId": "room", "name": "Room"})
	call(t, c, "map/scopes/join", map[string]any{"scopeId": "room", "agentId": "alice"})
	call(t, c, "map/scopes/join", map[string]any{"scopeId": "room", "agentId": "bob"})
	start := call(t, c, "x-concord/runs/start", map[string]any{"request": map[string]any{
		"requestId": "fixture-run", "task": "Is a fixture a promise?",
		"participants": []map[string]any{{"id": "alice"}, {"id": "bob"}, {"id": "carol"}},
		"roundPolicy":  map[string]any{"minRounds": 1, "maxRounds": 2},
		// Deadlines are absolute times in the state: ten years keep the run
		// in flight whenever the fixture is restored (an hour once let it
		// time out on restore).
		"waitingPolicy": map[string]any{"perTaskTimeoutMs": tenYearsMs, "perRoundTimeoutMs": 2 * tenYearsMs},
	}})
	runID, _ := start["runId"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := backup.Save(ctx, adminConn(t, srv), base+".snap"); err != nil {
		t.Fatalf("save fixture: %v", err)
	}
	st := readState(t, srv, c, map[string]string{runID: ""})
	raw, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".json", append(raw, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readState reads the replicated state a fixture pins; runs names the run
// ids to read.
func readState(t *testing.T, srv *node.Server, c *rpc.Conn, runs map[string]string) fixtureState {
	t.Helper()
	r := srv.Registry()
	var st fixtureState
	st.Agents, _ = json.Marshal(r.Agents())
	st.Scopes, _ = json.Marshal(r.Scopes())
	for _, s := range r.Sessions() {
		if s.ParticipantType != "client" { // the reader's own session
			st.Sessions = append(st.Sessions, s.ParticipantID)
		}
	}
	st.Runs = map[string]string{}
	for id := range runs {
		var got struct {
			Run struct {
				Status, Phase string
				Round         int
				Participants  []string
			}
		}
		raw, _ := json.Marshal(call(t, c, "x-concord/runs/get", map[string]any{"runId": id}))
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		st.Runs[id] = fmt.Sprintf("%s/%s/%d/%v", got.Run.Status, got.Run.Phase, got.Run.Round, got.Run.Participants)
	}
	return st
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func startDev(t testing.TB) *node.Server {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

func adminConn(t testing.TB, srv *node.Server) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func dial(t testing.TB, srv *node.Server) *rpc.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := rpc.Dial(ctx, srv.MAPURL(), rpc.DefaultClientConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close("test done"); <-conn.Done() })
	return conn
}

func call(t testing.TB, c *rpc.Conn, method string, params any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := c.Call(ctx, method, params)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %s: %v", method, raw, err)
	}
	return out
}
