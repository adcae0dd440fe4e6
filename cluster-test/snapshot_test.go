package clustertest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/backup"
	"github.com/concordmap/concord/node/client/argueclient"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// operatorConn dials a node's gRPC port as `concord snapshot` does: with
// the operator's certificate.
func operatorConn(t testing.TB, n *Node) *grpc.ClientConn {
	t.Helper()
	cc, err := adminConn(n.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func saveSnapshot(t testing.TB, n *Node, path string) backup.Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ConvergeTimeout)
	defer cancel()
	info, err := backup.Save(ctx, operatorConn(t, n), path)
	if err != nil {
		t.Fatalf("save snapshot through %s: %v", n, err)
	}
	return info
}

func restoreSnapshot(t testing.TB, c *Cluster, n *Node, path string) backup.Restored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ConvergeTimeout)
	defer cancel()
	res, err := backup.Restore(ctx, operatorConn(t, n), path)
	if err != nil {
		t.Fatalf("restore snapshot through %s: %v", n, err)
	}
	c.WaitApplied(t, res.Index)
	return res
}

// runsView reads every run, with result, events and engine state, as the
// clients see them on each node; it fails unless all nodes agree.
func runsView(t testing.TB, c *Cluster, ids ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	readers := clusterReaders(t, c)
	for _, id := range ids {
		params := map[string]any{"runId": id, "include": []string{"result", "events", "state"}}
		for k, cl := range readers {
			raw, err := cl.Call(argueclient.MethodGet, params)
			if err != nil {
				t.Fatalf("get run %s on %s: %s", id, cl.url, Describe(err))
			}
			if k > 0 && out[id] != string(raw) {
				t.Fatalf("run %s differs between nodes:\n%s\n%s", id, out[id], raw)
			}
			out[id] = string(raw)
		}
	}
	return out
}

// registryDigest returns the registry digest every running node agrees
// on, or an error while they differ.
func registryDigest(c *Cluster) (digest, summary string, err error) {
	for k, n := range c.Running() {
		d, s := Digest(n.Server().Registry())
		if k > 0 && d != digest {
			return "", "", fmt.Errorf("registry of %s differs: %s vs %s", n, s, summary)
		}
		digest, summary = d, s
	}
	return digest, summary, nil
}

// agreedDigest waits until every running node has the same registry.
func agreedDigest(t testing.TB, c *Cluster) (digest, summary string) {
	t.Helper()
	Eventually(t, ConvergeTimeout, func() (err error) {
		digest, summary, err = registryDigest(c)
		return err
	})
	return digest, summary
}

// TestSnapshot_SaveBusyRestoreFresh saves snapshots of a 3-node system
// (agents, a scope, sessions with subscriptions, a finished and an
// in-flight consensus run) through a follower while a writer keeps
// registering agents, and restores them into a fresh 3-node system that
// has state of its own: every agent, scope, session and run comes back
// identical on every node, the fresh system's own state is gone, and
// corrupt or future-version files are refused with nothing changed.
func TestSnapshot_SaveBusyRestoreFresh(t *testing.T) {
	a := New(t, 3)
	urls := []string{a.Node(0).MAPURL(), a.Node(1).MAPURL(), a.Node(2).MAPURL()}
	script := personaScript(nil)
	gate := &phaseGate{}
	t.Cleanup(gate.open)
	for k, id := range runParticipants {
		startRunAgent(t, id, urls[k:k+1], scriptAgents(script, gate))
	}
	obs := newRunsObserver(t, urls)
	finished := obs.start(t, newRunRequest(t, "req-snap-done", "alice", runTaskTimeoutMs))
	obs.waitDone(t, finished)
	gate.arm("debate")
	inFlight := obs.start(t, newRunRequest(t, "req-snap-flight", "bob", runTaskTimeoutMs))
	gate.waitHeld(t, 3)

	host := agentOn(t, a, 0, "host", nil)
	host.MustCall("map/scopes/create", map[string]any{"scopeId": "room", "name": "Room"})
	host.MustCall("map/scopes/join", map[string]any{"scopeId": "room", "agentId": "host"})
	watcher := a.Connect(t, 2, map[string]any{"participantType": "client"})
	subscribeRetry(t, watcher, map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}})

	// A writer keeps the leader busy while the first snapshot is taken.
	busy := a.Connect(t, 1, map[string]any{"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"}})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var written atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if busy.Register(fmt.Sprintf("busy-%04d", i), nil) == nil {
				written.Add(1)
			}
		}
	}()
	Eventually(t, DeliveryTimeout, func() error {
		if written.Load() < 20 {
			return fmt.Errorf("%d busy writes so far", written.Load())
		}
		return nil
	})
	dir := t.TempDir()
	follower := a.Followers(t)[0]
	busyInfo := saveSnapshot(t, follower, filepath.Join(dir, "busy.snap"))
	stop.Store(true)
	wg.Wait()
	t.Logf("busy snapshot at index %d after %d concurrent writes", busyInfo.Index, written.Load())

	// Federation state (a link, a pending peering token) and an ACL key,
	// which the restore must bring back too.
	addFedAndACLState(t, a, "peer-x")
	wantFedACL := fedACLView(t, a)
	wantRuns := runsView(t, a, finished, inFlight) // (its readers' sessions are in the digest)
	// Subscription cursors move as clients ack events, a little after the
	// writes stop: save until A held still across a whole save.
	quietPath := filepath.Join(dir, "quiet.snap")
	var wantDigest, wantSummary string
	var quiet backup.Info
	Eventually(t, ConvergeTimeout, func() error {
		var err error
		if wantDigest, wantSummary, err = registryDigest(a); err != nil {
			return err
		}
		quiet = saveSnapshot(t, a.Leader(t), quietPath)
		if d, s, err := registryDigest(a); err != nil || d != wantDigest {
			return fmt.Errorf("system A changed during the save (%s, was %s; %v)", s, wantSummary, err)
		}
		return nil
	})
	if quiet.Index <= busyInfo.Index || len(quiet.Modules) == 0 {
		t.Fatalf("quiet snapshot %+v after busy %+v", quiet, busyInfo)
	}

	// The restored sessions are homed on n1..n3, which are B's node ids
	// too, so B's reconciler rightly treats them as its own: once gossip
	// has held one of B's nodes failed for SessionDetachGrace, or dead for
	// DeadServerCleanupDelay (the follower stopped below, or probes missed
	// under a loaded -race run), the leader detaches every session homed
	// there, adding participant_disconnected plus one event per agent
	// (the busy writer owns hundreds) to B after the restore. That failed
	// the comparison with A now and then ("N extra events"); what B does
	// later about its members is not the restore under test, so B waits
	// longer than the test before acting on a failed member.
	b := New(t, 3, WithNodeConfig(func(_ int, c *node.Config) {
		c.Cluster.SessionDetachGrace, c.Cluster.DeadServerCleanupDelay = time.Hour, time.Hour
	}))
	agentOn(t, b, 0, "stale", nil) // B's own state, which a restore replaces
	addFedAndACLState(t, b, "peer-stale")

	// The busy snapshot, through a follower, while the other follower is
	// down: consistent on every node (the stopped one installs it from the
	// leader when it returns) and holding a prefix of the writer's
	// registrations.
	followers := b.Followers(t)
	b.Stop(t, followers[1].Index)
	restoreSnapshot(t, b, followers[0], filepath.Join(dir, "busy.snap"))
	b.Restart(t, followers[1].Index)
	b.RequireConverged(t)
	busyAgents := map[string]bool{}
	for _, ag := range b.Node(0).Server().Registry().Agents() {
		busyAgents[ag.ID] = true
	}
	if busyAgents["stale"] || !busyAgents["host"] || !busyAgents["alice"] {
		t.Fatalf("after the busy restore B has agents %v", busyAgents)
	}
	for i := range int(written.Load()) {
		if id := fmt.Sprintf("busy-%04d", i); !busyAgents[id] && busyAgents[fmt.Sprintf("busy-%04d", i+1)] {
			t.Fatalf("busy snapshot holds busy-%04d but not %s: not a consistent cut", i+1, id)
		}
	}

	// The quiet snapshot, through the leader: identical to A.
	restoreSnapshot(t, b, b.Leader(t), quietPath)
	gotDigest, gotSummary := agreedDigest(t, b)
	if gotDigest != wantDigest {
		t.Fatalf("restored registry %s, want %s", gotSummary, wantSummary)
	}
	if got := fedACLView(t, b); got != wantFedACL {
		t.Fatalf("federation links and ACL keys after restore:\n%s\nwant\n%s", got, wantFedACL)
	}
	gotRuns := runsView(t, b, finished, inFlight)
	for id, want := range wantRuns {
		if gotRuns[id] != want {
			t.Fatalf("run %s after restore:\n%s\nwant\n%s", id, gotRuns[id], want)
		}
	}
	b.RequireConverged(t)
	wantDigest, _ = agreedDigest(t, b) // now with runsView's sessions on B

	// Bad files: refused by the node itself (sent raw, past the CLI's own
	// check), and nothing changes.
	good, err := os.ReadFile(quietPath)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)/2] ^= 0xff
	future := bytes.Clone(good)
	binary.BigEndian.PutUint16(future[8:], 99)
	for _, tc := range []struct {
		name string
		file []byte
		code codes.Code
	}{
		{"corrupt", corrupt, codes.InvalidArgument},
		{"truncated", good[:len(good)/3], codes.InvalidArgument},
		{"future version", future, codes.FailedPrecondition},
	} {
		err := restoreRaw(t, b.Followers(t)[0], tc.file)
		if status.Code(err) != tc.code {
			t.Fatalf("%s: restore err %v, want %s", tc.name, err, tc.code)
		}
		if d, s := agreedDigest(t, b); d != wantDigest {
			t.Fatalf("%s: refused restore changed the registry: %s", tc.name, s)
		}
		path := filepath.Join(dir, tc.name+".snap")
		if err := os.WriteFile(path, tc.file, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := backup.Restore(context.Background(), operatorConn(t, b.Node(0)), path); !errors.Is(err, backup.ErrCorrupt) && !errors.Is(err, backup.ErrUnsupportedVersion) {
			t.Fatalf("%s: CLI restore err %v", tc.name, err)
		}
	}
	gate.open()
	b.RequireConverged(t) // (B's ledger holds "stale", which the restore removed)
	a.RequireInvariants(t)
}

// restoreRaw streams file to the node's Restore as is.
func restoreRaw(t testing.TB, n *Node, file []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	st, err := concordv1.NewSnapshotsClient(operatorConn(t, n)).Restore(ctx)
	if err != nil {
		return err
	}
	for len(file) > 0 {
		k := min(len(file), 64<<10)
		if err := st.Send(&concordv1.SnapshotChunk{Data: file[:k]}); err != nil {
			break
		}
		file = file[k:]
	}
	_, err = st.CloseAndRecv()
	return err
}

// addFedAndACLState gives c a federation link to peer (its address is
// never reachable: the record is what a snapshot carries), a peering token
// issued for another system, and an API key.
func addFedAndACLState(t testing.TB, c *Cluster, peer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	l := c.Leader(t)
	link := &concordv1.FedLink{PeerSystemId: peer, PeerAddrs: []string{"127.0.0.1:1"}, CreatedAtMs: 1_750_000_000_000, Initiator: true}
	if _, _, err := l.Store().Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_PUT, &concordv1.FedLinkPut{Link: link}); err != nil {
		t.Fatalf("federation link on %s: %v", l, err)
	}
	if _, err := c.FederationClient(t, l.Index).CreateToken(ctx, &concordv1.CreateTokenRequest{PeerSystemId: peer + "-next"}); err != nil {
		t.Fatalf("peering token on %s: %v", l, err)
	}
	if _, err := l.Server().ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: peer + "-bot-*", ParticipantTypes: []string{"agent"}, Description: "snapshot test key"}); err != nil {
		t.Fatalf("API key on %s: %v", l, err)
	}
}

// fedACLView is the federation module's whole state (links, tokens,
// imported directories) and the API keys, as every running node of c
// agrees on them.
func fedACLView(t testing.TB, c *Cluster) string {
	t.Helper()
	var view string
	Eventually(t, ConvergeTimeout, func() error {
		for k, n := range c.Running() {
			srv := n.Server()
			var b strings.Builder
			for _, r := range srv.Federation().State().Snapshot() {
				b.WriteString(prototext.Format(r))
				b.WriteString("\n")
			}
			keys, err := srv.ACLAdmin().ListTokens(context.Background(), &concordv1.AclListTokensRequest{})
			if err != nil {
				return err
			}
			b.WriteString(prototext.Format(keys))
			if k > 0 && b.String() != view {
				return fmt.Errorf("federation/ACL state differs on %s", n)
			}
			view = b.String()
		}
		return nil
	})
	if !strings.Contains(view, "peer_system_id") || !strings.Contains(view, "snapshot test key") {
		t.Fatalf("federation/ACL view lacks the link or the key:\n%s", view)
	}
	return view
}
