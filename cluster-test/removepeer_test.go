//go:build linux

// Linux only because the CLI scenario runs on the process harness
// (procs_linux.go); the in-process scenario would run anywhere.

package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/cluster"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestRemovePeer_ForcedRemovalOfLiveFollower drives `raft remove-peer`
// (the Cluster RemovePeer RPC) against a follower that gossip sees alive:
//
//  1. without force it is refused with FAILED_PRECONDITION on every node
//     the request lands on, and no configuration change is made;
//  2. with force (sent to the other follower, so it is forwarded to the
//     leader) it is removed, and every surviving reconciler keeps it out
//     for several reconcile intervals while the majority commits writes;
//  3. the same holds after leadership moves to the other survivor;
//  4. a re-admission condition (reconciler_removed.go: it leaves, dies,
//     restarts or rejoins at another address): the node is stopped until
//     every survivor's reconciler has seen it dead, then restarted with
//     the same addresses, and it becomes a voter again. (A restart before
//     gossip sees it dead: TestRemovePeer_ForcedThenQuickRestartRejoins.)
func TestRemovePeer_ForcedRemovalOfLiveFollower(t *testing.T) {
	rlog := &removalLog{}
	c := New(t, 3, WithNodeConfig(rlog.tap))
	interval := FastConfig().Cluster.ReconcileInterval
	l := c.Leader(t)
	all := idsOf(c.Nodes())
	requireVoters(t, c, l, all)
	fs := others(c.Running(), l)
	victim, other := fs[0], fs[1]
	rest := []*Node{l, other}
	restIDs := idsOf(rest)
	cl := c.Connect(t, other.Index, map[string]any{"participantType": "system"})
	writes := 0
	write := func(tag string) {
		t.Helper()
		for range 3 {
			writes++
			registerRetry(t, cl, fmt.Sprintf("%s-%d", tag, writes), nil)
		}
	}
	write("before")

	// 1. Refused without force wherever it lands (the check runs on the
	// receiving node, before anything is forwarded or proposed).
	cfgIndex := l.Store().Stats()["latest_configuration_index"]
	for _, via := range []*Node{l, other, victim} {
		err := removePeer(via, victim.ID, false)
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("remove-peer %s via %s without force = %v, want FailedPrecondition", victim, via, err)
		}
		msg := status.Convert(err).Message()
		for _, want := range []string{victim.ID + " is alive in gossip", "stop the node", "--force"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal via %s: %q does not mention %q", via, msg, want)
			}
		}
	}
	for _, n := range c.Running() {
		if err := votersAre(n, all); err != nil {
			t.Fatalf("after the refused removals: %v", err)
		}
	}
	if got := l.Store().Stats()["latest_configuration_index"]; got != cfgIndex {
		t.Fatalf("refused removals changed the configuration: index %s -> %s", cfgIndex, got)
	}

	// 2. Forced, through the other follower. A retry after an unknown
	// outcome is safe: removing an absent server changes nothing.
	mark := rlog.len()
	Eventually(t, MembershipTimeout, func() error { return removePeer(other, victim.ID, true) })
	Eventually(t, MembershipTimeout, func() error { return eachNode(rest, func(n *Node) error { return votersAre(n, restIDs) }) })
	// Every survivor has inferred the forced removal, so whichever leads
	// next keeps the victim out.
	Eventually(t, MembershipTimeout, func() error { return rlog.loggedBy(mark, msgForceRemoved, victim.ID, rest) })
	requireStaysOut(t, rest, restIDs, 5*interval)
	write("removed")
	requireStaysOut(t, rest, restIDs, 2*interval)

	// 3. Leadership moves to the other survivor (the only other voter).
	transferLeadership(t, c, rest, other)
	requireStaysOut(t, rest, restIDs, 5*interval)
	write("transferred")
	requireStaysOut(t, rest, restIDs, 2*interval)

	// 4. Stopped until gossip marks it dead on every survivor and their
	// reconcilers drop the mark, then restarted at the same addresses.
	mark = rlog.len()
	c.Stop(t, victim.Index)
	Eventually(t, MembershipTimeout, func() error {
		return eachNode(rest, func(n *Node) error { return memberStatusIs(c, n, victim.ID, concordv1.MemberStatus_MEMBER_STATUS_DEAD) })
	})
	Eventually(t, MembershipTimeout, func() error { return rlog.loggedBy(mark, msgMayReturn, victim.ID, rest) })
	c.Restart(t, victim.Index)
	requireVoters(t, c, c.Leader(t), all)
	write("readmitted")
	c.RequireInvariants(t)
}

// TestRemovePeer_CLI runs `concord raft remove-peer` of the real binary
// against three `concord server` processes: refused (exit 1, the reason on
// stderr) for a live follower without --force, which leaves the Raft
// configuration as it was; done (exit 0) with --force, after which
// `concord raft peers` on both survivors lists only them.
func TestRemovePeer_CLI(t *testing.T) {
	pc := StartProcs(t, 3)
	leader := pc.Leader(t)
	var fs []*Proc
	for _, p := range pc.Procs() {
		if p != leader {
			fs = append(fs, p)
		}
	}
	victim, other := fs[0], fs[1]
	all := []string{pc.Proc(0).ID, pc.Proc(1).ID, pc.Proc(2).ID}
	survivors := []string{leader.ID, other.ID}
	// Every node becomes a voter once the reconciler has seen it in gossip.
	Eventually(t, MembershipTimeout, func() error { return cliVoters(t, leader.GRPCAddr, all) })

	out, errOut, code := runCLI(t, "raft", "remove-peer", "--addr", leader.GRPCAddr, victim.ID)
	if code != 1 || out != "" {
		t.Fatalf("remove-peer without --force: exit %d, stdout %q, stderr %q; want exit 1 and no output", code, out, errOut)
	}
	for _, want := range []string{"FailedPrecondition", victim.ID + " is alive in gossip", "--leave-on-shutdown", "--force"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not mention %q", errOut, want)
		}
	}
	if err := cliVoters(t, leader.GRPCAddr, all); err != nil {
		t.Fatalf("after the refused removal: %v", err)
	}

	out, errOut, code = runCLI(t, "raft", "remove-peer", "--force", "--addr", other.GRPCAddr, victim.ID)
	if want := "removed " + victim.ID + " from the raft configuration\n"; code != 0 || out != want {
		t.Fatalf("remove-peer --force: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errOut, want)
	}
	for _, p := range []*Proc{leader, other} {
		Eventually(t, MembershipTimeout, func() error { return cliVoters(t, p.GRPCAddr, survivors) })
	}
}

// The reconciler's log lines (node/cluster/reconciler_removed.go) when it
// infers a forced removal and when it lets the server back in. They are
// the only outside sign that a follower's reconciler has seen either.
const (
	msgForceRemoved = "server removed from raft while alive; not adding it back until it leaves, dies, restarts or rejoins"
	msgMayReturn    = "force-removed server may be added again"
)

// removalLog records, from every node's logger, the reconciler lines
// above with their node and "peer".
type removalLog struct {
	mu     sync.Mutex
	events []removalEvent
}

type removalEvent struct{ node, msg, peer string }

// tap wraps a node's logger (a WithNodeConfig hook, applied on every
// start, restarts included).
func (l *removalLog) tap(_ int, cfg *node.Config) {
	cfg.Logger = slog.New(&tapHandler{inner: cfg.Logger.Handler(), log: l, node: cfg.NodeID})
}

func (l *removalLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// loggedBy reports an error unless every node of nodes logged msg about
// peer after the first since events.
func (l *removalLog) loggedBy(since int, msg, peer string, nodes []*Node) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range nodes {
		if !slices.Contains(l.events[since:], removalEvent{node: n.ID, msg: msg, peer: peer}) {
			return fmt.Errorf("%s has not logged %q for %s", n, msg, peer)
		}
	}
	return nil
}

// tapHandler passes records on to inner and copies the removal lines into
// log, whatever inner's level.
type tapHandler struct {
	inner slog.Handler
	log   *removalLog
	node  string
}

func (h *tapHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= slog.LevelInfo || h.inner.Enabled(ctx, lv)
}

func (h *tapHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == msgForceRemoved || r.Message == msgMayReturn {
		ev := removalEvent{node: h.node, msg: r.Message}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "peer" {
				ev.peer = a.Value.String()
				return false
			}
			return true
		})
		h.log.mu.Lock()
		h.log.events = append(h.log.events, ev)
		h.log.mu.Unlock()
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tapHandler{inner: h.inner.WithAttrs(as), log: h.log, node: h.node}
}

func (h *tapHandler) WithGroup(name string) slog.Handler {
	return &tapHandler{inner: h.inner.WithGroup(name), log: h.log, node: h.node}
}

// TestRemovePeer_ForcedThenQuickRestartRejoins: a follower force-removed
// while alive and restarted at once, at the same addresses (faster than
// gossip declares it dead), is a new process with a new boot id: the
// survivors drop their mark and the leader adds it back, so its start
// succeeds within seconds instead of failing after the ready timeout with
// "no raft leader".
func TestRemovePeer_ForcedThenQuickRestartRejoins(t *testing.T) {
	forcedRemovalThenRestart(t, false)
}

// TestRemovePeer_ForcedWithoutItsRemovalEntry is the same removal when the
// entry that removes the victim never reaches it (the leader's last append
// to a removed server is best effort): cut off from the leader, it learns
// it was removed from a peer's view of the leader's configuration.
func TestRemovePeer_ForcedWithoutItsRemovalEntry(t *testing.T) {
	forcedRemovalThenRestart(t, true)
}

// forcedRemovalThenRestart force-removes a running follower, checks its
// readiness says it is out of the configuration, then restarts it and
// checks it rejoins quickly. With cutFirst the leader cannot reach it
// (Raft nor gRPC) from just before the removal until its restart.
func forcedRemovalThenRestart(t *testing.T, cutFirst bool) {
	c := New(t, 3)
	l := c.Leader(t)
	all := idsOf(c.Nodes())
	requireVoters(t, c, l, all)
	victim := others(c.Running(), l)[0]
	rest := others(c.Running(), victim)
	if cutFirst {
		c.Net.Cut(l.ID, victim.ID)
	}
	Eventually(t, MembershipTimeout, func() error { return removePeer(l, victim.ID, true) })
	Eventually(t, MembershipTimeout, func() error { return eachNode(rest, func(n *Node) error { return votersAre(n, idsOf(rest)) }) })
	if cutFirst {
		if err := votersAre(victim, all); err != nil {
			t.Fatalf("the cut victim got its removal entry after all: %v", err)
		}
	}

	// Left out, the running victim's readiness says what happened and
	// what to do, not just "no raft leader".
	Eventually(t, MembershipTimeout, func() error {
		code, body, err := httpGet(victim.HTTPAddr, "/v1/ready")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(body), "not in the raft configuration") {
			return fmt.Errorf("force-removed node's /v1/ready: %d %s %v", code, body, err)
		}
		return nil
	})

	c.Net.Heal()
	start := time.Now()
	c.Stop(t, victim.Index)
	c.Restart(t, victim.Index) // waits until it is ready: it was added back
	requireVoters(t, c, c.Leader(t), all)
	if took := time.Since(start); took > scaled(15*time.Second) {
		t.Fatalf("the force-removed node took %s to rejoin after a restart", took)
	}
	t.Logf("force-removed node restarted and rejoined in %s", time.Since(start).Round(time.Millisecond))
	c.RequireInvariants(t)
}

// removePeer calls node n's Cluster RemovePeer RPC (what the CLI sends),
// dialled directly, outside the fault network.
func removePeer(n *Node, id string, force bool) error {
	conn, err := adminConn(n.GRPCAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	_, err = concordv1.NewClusterClient(conn).RemovePeer(cluster.WithAdminMarker(ctx), &concordv1.RemovePeerRequest{Id: id, Force: force})
	return err
}

// votersAre checks n's Raft configuration (the latest it knows, so a
// proposed re-add shows at once) is exactly the voters want.
func votersAre(n *Node, want []string) error {
	st := n.Store()
	if st == nil {
		return fmt.Errorf("%s is down", n)
	}
	servers, err := st.Configuration(context.Background())
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	var got []string
	for _, s := range servers {
		if !s.Voter {
			return fmt.Errorf("%s: %s is not a voter: %+v", n, s.ID, servers)
		}
		got = append(got, s.ID)
	}
	if err := sameSet(got, want); err != nil {
		return fmt.Errorf("raft voters on %s: %w", n, err)
	}
	return nil
}

func eachNode(nodes []*Node, check func(*Node) error) error {
	for _, n := range nodes {
		if err := check(n); err != nil {
			return err
		}
	}
	return nil
}

// requireStaysOut checks for d that every node of nodes keeps exactly the
// voters want. An absence can only be watched for a bounded time: d spans
// several reconcile intervals, each of which is a leader pass that would
// re-add a live server it does not know was removed by force.
func requireStaysOut(t *testing.T, nodes []*Node, want []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if err := eachNode(nodes, func(n *Node) error { return votersAre(n, want) }); err != nil {
			t.Fatalf("force-removed server not kept out: %v", err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(PollInterval) // watching for a re-add that must not happen
	}
}

// transferLeadership moves leadership among nodes to target and waits
// until it is stable there.
func transferLeadership(t *testing.T, c *Cluster, nodes []*Node, target *Node) {
	t.Helper()
	Eventually(t, LeaderTimeout, func() error {
		cur, err := c.agreedLeader(nodes)
		if err != nil {
			return err
		}
		if cur == target {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		if err := cur.Store().LeadershipTransfer(ctx); err != nil {
			return err
		}
		return fmt.Errorf("transferred from %s, waiting for %s", cur, target)
	})
	if l := c.LeaderAmong(t, nodes...); l != target {
		t.Fatalf("leadership went to %s, then %s; want it to stay on %s", target, l, target)
	}
}

// memberStatusIs checks how n's gossip sees member id.
func memberStatusIs(c *Cluster, n *Node, id string, want concordv1.MemberStatus) error {
	members, err := c.Members(n)
	if err != nil {
		return err
	}
	for _, m := range members {
		if m.GetId() == id {
			if m.GetStatus() != want {
				return fmt.Errorf("%s sees %s %s, want %s", n, id, m.GetStatus(), want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s does not know %s", n, id)
}

// runCLI runs the concord binary and returns its stdout, stderr and exit
// code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ConcordBinary(t), args...)
	cmd.Env = append(os.Environ(), OperatorEnv(t)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run concord %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// cliVoters checks `concord raft peers --addr addr` lists exactly want,
// all voters.
func cliVoters(t *testing.T, addr string, want []string) error {
	t.Helper()
	out, errOut, code := runCLI(t, "raft", "peers", "--addr", addr)
	if code != 0 {
		return fmt.Errorf("raft peers --addr %s: exit %d: %s", addr, code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "NODE") {
		return fmt.Errorf("raft peers --addr %s: no header in %q", addr, out)
	}
	var got []string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 4 || f[2] != "voter" {
			return fmt.Errorf("raft peers --addr %s: unexpected row %q", addr, line)
		}
		got = append(got, f[0])
	}
	if err := sameSet(got, want); err != nil {
		return fmt.Errorf("raft peers --addr %s: %w", addr, err)
	}
	return nil
}
