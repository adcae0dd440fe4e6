package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestDrain_ParticipantsResumeOnOtherNodes drains a node holding 200
// connected participants, each with a subscription and an agent, while a
// writer on the leader keeps registering agents. Every participant gets
// the reconnect hint and a close, resumes its session on a node the hint
// names (reconnected, same session id), and its subscription delivers an
// event written after the drain. The drained node's /v1/ready is unready
// during the drain; it then leaves the Raft configuration. No
// acknowledged write is lost (RequireInvariants checks the ledger).
func TestDrain_ParticipantsResumeOnOtherNodes(t *testing.T) {
	const participants = 200
	c := New(t, 3)
	l := c.Leader(t)
	d := others(c.Running(), l)[0]
	sub := map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}}
	clients := make([]*Client, participants)
	subs := make([]string, participants)
	start := time.Now()
	for k := range participants {
		id := fmt.Sprintf("dr-%03d", k)
		clients[k] = agentOn(t, c, d.Index, id, nil)
		subs[k] = subscribeRetry(t, clients[k], sub)
	}
	t.Logf("%d participants on %s in %s", participants, d, time.Since(start).Round(time.Millisecond))

	// Acknowledged writes on the leader all through the drain.
	writer := c.Connect(t, l.Index, map[string]any{"participantType": "system"})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked atomic.Int64
	wg.Go(func() {
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := writer.Register(fmt.Sprintf("w-%d", k), nil); err == nil {
				acked.Add(1)
			}
		}
	})
	stopWriter := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWriter()

	// Three voters and --min-quorum 3: draining one is refused unless forced.
	res := c.StartForcedDrain(t, d.Index, l.Index, 30*time.Second)
	if res.GetSessions() != participants {
		t.Errorf("drain asked %d connections to move, want %d", res.GetSessions(), participants)
	}
	requireUnready(t, d)

	start = time.Now()
	errs := make([]error, participants)
	var rwg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for k, cl := range clients {
		rwg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			clients[k], errs[k] = resumeFromHint(t, c, cl)
		})
	}
	rwg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("resume after the drain: %v", err)
	}
	t.Logf("%d participants resumed elsewhere in %s", participants, time.Since(start).Round(time.Millisecond))

	c.FinishDrain(t, d.Index, 60*time.Second)
	rest := c.Running()
	Eventually(t, MembershipTimeout, func() error {
		return eachNode(rest, func(n *Node) error { return votersAre(n, idsOf(rest)) })
	})

	registerRetry(t, writer, "after-drain", nil)
	for k, cl := range clients {
		waitRegistered(t, cl, subs[k], "after-drain")
	}
	stopWriter()
	t.Logf("%d writes acknowledged on %s during the drain", acked.Load(), l)
	c.RequireInvariants(t)
}

// TestDrain_VoterBelowMinQuorumRefused asks, through the leader, for the
// drain of a voter of three with --min-quorum 3 and no non-voter: refused
// (FAILED_PRECONDITION naming --min-quorum and --force) and the node does
// not start draining; forced, it drains and leaves two voters.
func TestDrain_VoterBelowMinQuorumRefused(t *testing.T) {
	c := New(t, 3)
	l := c.Leader(t)
	d := others(c.Running(), l)[0]
	_, err := c.Drain(d.Index, l.Index, 10*time.Second, false)
	if status.Code(errors.Unwrap(err)) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "below --min-quorum 3") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("drain of a voter below --min-quorum: %v, want FAILED_PRECONDITION naming --min-quorum 3 and --force", err)
	}
	if d.Server().Draining() {
		t.Fatalf("%s is draining after the refusal", d)
	}
	c.StartForcedDrain(t, d.Index, l.Index, 10*time.Second)
	c.FinishDrain(t, d.Index, 60*time.Second)
	rest := c.Running()
	Eventually(t, MembershipTimeout, func() error {
		return eachNode(rest, func(n *Node) error { return votersAre(n, idsOf(rest)) })
	})
}

// resumeFromHint waits for cl's connection to close after the reconnect
// hint, then resumes its session on the first node the hint names.
func resumeFromHint(t *testing.T, c *Cluster, cl *Client) (*Client, error) {
	select {
	case <-cl.Done():
	case <-time.After(CallTimeout):
		return nil, fmt.Errorf("%s: connection not closed by the drain", cl.Session().ParticipantID)
	}
	hint, ok := cl.Hint()
	if !ok || len(hint.Nodes) == 0 {
		return nil, fmt.Errorf("%s: closed without a reconnect hint", cl.Session().ParticipantID)
	}
	s := cl.Session()
	url := hint.Nodes[int(s.SessionID[len(s.SessionID)-1])%len(hint.Nodes)].URL
	nc, err := Dial(t, url, c.Ledger)
	if err != nil {
		return nil, err
	}
	nc.SetToken(c.Token())
	var res ConnectResult
	err = Poll(context.Background(), MembershipTimeout, func() error {
		res, err = nc.Connect(map[string]any{
			"participantType": "agent", "participantId": s.ParticipantID,
			"sessionId": s.SessionID, "resumeToken": s.ResumeToken,
		})
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: resume on %s: %s", s.ParticipantID, url, Describe(err))
	}
	if !res.Reconnected || res.SessionID != s.SessionID {
		return nil, fmt.Errorf("%s: resume on %s gave %+v, want reconnected session %s", s.ParticipantID, url, res, s.SessionID)
	}
	return nc, nil
}

// requireUnready checks that n's /v1/ready answers 503 naming the drain.
func requireUnready(t *testing.T, n *Node) {
	t.Helper()
	web := &http.Client{Timeout: CallTimeout, Transport: &http.Transport{TLSClientConfig: ClientTLS()}}
	defer web.CloseIdleConnections()
	resp, err := web.Get(n.Server().HTTPURL() + "/v1/ready")
	if err != nil {
		t.Fatalf("ready of %s: %v", n, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "draining") {
		t.Fatalf("ready of %s while draining: %d %s", n, resp.StatusCode, body)
	}
}

// TestDrain_ConcurrentVotersOneSpare asks for the drains of two voters of
// three (--min-quorum 3) at the same moment, with one non-voter to promote:
// each drained node alone would see the spare and pass, but the leader
// admits drains one at a time and counts the first, so exactly one is
// admitted and the other is refused naming --min-quorum. The admitted one
// drains and the spare takes its place: the voters never drop below 3.
// Once it left, its recorded admission is released on every replica.
func TestDrain_ConcurrentVotersOneSpare(t *testing.T) {
	c := New(t, 4, WithNodeConfig(func(_ int, cfg *node.Config) { cfg.Cluster.RaftVoters = 3 }))
	voters, _ := waitSuffrage(t, c, 3, 1)
	l := c.Leader(t)
	var drained []*Node
	for _, id := range voters {
		if id != l.ID {
			drained = append(drained, c.NodeByID(id))
		}
	}
	minVoters := watchMinVoters(c)
	defer minVoters()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k, d := range drained {
		wg.Go(func() {
			<-start
			_, errs[k] = c.Drain(d.Index, l.Index, MembershipTimeout, false)
		})
	}
	close(start)
	wg.Wait()
	admitted := -1
	for k, err := range errs {
		switch {
		case err == nil && admitted < 0:
			admitted = k
		case err == nil:
			t.Fatalf("both drains admitted (%s and %s): together they leave 2 voters with one spare, below --min-quorum 3", drained[0], drained[1])
		case status.Code(errors.Unwrap(err)) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--min-quorum 3"):
			t.Fatalf("drain of %s: %v, want admitted or FAILED_PRECONDITION naming --min-quorum 3", drained[k], err)
		}
	}
	if admitted < 0 {
		t.Fatalf("both drains refused: %v; %v", errs[0], errs[1])
	}
	if refused := drained[1-admitted]; refused.Server().Draining() {
		t.Fatalf("%s is draining after its refusal", refused)
	}
	c.FinishDrain(t, drained[admitted].Index, 2*MembershipTimeout)
	waitSuffrage(t, c, 3, 0)
	if m := minVoters(); m < 3 {
		t.Fatalf("the configuration held %d voters during the drain, below MinQuorum 3", m)
	}
	// The drained node left the configuration: the leader released its
	// admission on every replica.
	Eventually(t, MembershipTimeout, func() error {
		return eachNode(c.Running(), func(n *Node) error {
			if adm, _ := n.Server().Registry().(*registry.State).DrainAdmissions(); len(adm) != 0 {
				return fmt.Errorf("%s still holds drain admissions %+v", n, adm)
			}
			return nil
		})
	})
}

// TestDrain_VoterWaitsForSlowPromotion drains a voter with a sessions
// timeout of 1ms while its only replacement, a non-voter that just joined,
// is not yet stable (ServerStabilizationTime 4s): the sessions' timeout
// has passed at once, but the voter waits, on its own promotion bound, for
// the autopilot to promote the replacement and demote it before it
// leaves, so the configuration never holds fewer than 3 voters.
func TestDrain_VoterWaitsForSlowPromotion(t *testing.T) {
	c := New(t, 4, WithNodeConfig(func(_ int, cfg *node.Config) {
		cfg.Cluster.RaftVoters = 3
		cfg.Cluster.ServerStabilizationTime = scaled(4 * time.Second)
	}))
	voters, nonvoters := waitSuffrage(t, c, 3, 1)
	l := c.Leader(t)
	d := c.NodeByID(voters[0])
	if d == l {
		d = c.NodeByID(voters[1])
	}
	minVoters := watchMinVoters(c)
	defer minVoters()
	c.StartDrain(t, d.Index, l.Index, time.Millisecond)
	c.FinishDrain(t, d.Index, 2*MembershipTimeout)
	v, _ := waitSuffrage(t, c, 3, 0)
	if !slices.Contains(v, nonvoters[0]) {
		t.Fatalf("voters %v after the drain, want the promoted %s among them", v, nonvoters[0])
	}
	if m := minVoters(); m < 3 {
		t.Fatalf("the configuration held %d voters during the drain (the voter left before its replacement was promoted), below MinQuorum 3", m)
	}
}

// TestDrain_AdmissionSurvivesLeaderChange: on three voters with one spare
// (--min-quorum 3), the leader admits a voter's drain (asked directly, so
// that node never advertises draining in gossip), and leadership moves to
// another voter before any gossip could show it. The admission is in
// replicated state (every replica holds it), so the new leader still
// counts it: the drain of the old leader, which with the first would leave
// 2 voters, is refused naming --min-quorum, and it does not start
// draining.
func TestDrain_AdmissionSurvivesLeaderChange(t *testing.T) {
	c := New(t, 4, WithNodeConfig(func(_ int, cfg *node.Config) { cfg.Cluster.RaftVoters = 3 }))
	voters, _ := waitSuffrage(t, c, 3, 1)
	Eventually(t, MembershipTimeout, func() error {
		for _, n := range c.Running() {
			if got := recordedLevel(n); got < registry.FSMLevelDrainAdmissions {
				return fmt.Errorf("%s records system FSM level %d, want at least %d", n, got, registry.FSMLevelDrainAdmissions)
			}
		}
		return nil
	})
	a := c.Leader(t)
	var first, next *Node
	for _, id := range voters {
		switch n := c.NodeByID(id); {
		case n == a:
		case first == nil:
			first = n
		default:
			next = n
		}
	}
	conn, err := adminConn(a.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	if _, err := concordv1.NewOperatorClient(conn).AdmitDrain(ctx, &concordv1.AdmitDrainRequest{NodeId: first.ID, LeaseMs: time.Minute.Milliseconds()}); err != nil {
		t.Fatalf("admit the drain of %s on leader %s: %v", first, a, err)
	}
	Eventually(t, MembershipTimeout, func() error {
		return eachNode(c.Running(), func(n *Node) error {
			adm, _ := n.Server().Registry().(*registry.State).DrainAdmissions()
			if len(adm) != 1 || adm[0].NodeID != first.ID {
				return fmt.Errorf("%s holds drain admissions %+v, want %s's", n, adm, first)
			}
			return nil
		})
	})
	transferLeadership(t, c, c.Running(), next)
	_, err = c.Drain(a.Index, next.Index, MembershipTimeout, false)
	if status.Code(errors.Unwrap(err)) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--min-quorum 3") {
		t.Fatalf("drain of %s on the new leader %s while %s's admission holds: %v, want FAILED_PRECONDITION naming --min-quorum 3", a, next, first, err)
	}
	if a.Server().Draining() {
		t.Fatalf("%s is draining after its refusal", a)
	}
}

// TestDrain_MixedLevelsAdmitInMemory: while one server runs a build below
// registry.FSMLevelDrainAdmissions (injected with
// registry.Config.BuildFSMLevel), the system records the lower level, and
// the leader keeps the drains it admits in its memory: none reaches the
// log (that build would panic on the command type), and a second voter's
// drain, which with the first would leave 2 voters, is still refused.
func TestDrain_MixedLevelsAdmitInMemory(t *testing.T) {
	c := New(t, 4, WithNodeConfig(func(i int, cfg *node.Config) {
		cfg.Cluster.RaftVoters = 3
		if i == 0 { // bootstrapped as a voter: a joiner below every server's level is refused
			cfg.Registry.BuildFSMLevel = registry.FSMLevelSystemRecord
		}
	}))
	voters, _ := waitSuffrage(t, c, 3, 1)
	Eventually(t, MembershipTimeout, func() error {
		for _, n := range c.Running() {
			if got := recordedLevel(n); got != registry.FSMLevelSystemRecord {
				return fmt.Errorf("%s records system FSM level %d, want %d", n, got, registry.FSMLevelSystemRecord)
			}
		}
		return nil
	})
	a := c.Leader(t)
	var drained []string
	for _, id := range voters {
		if id != a.ID {
			drained = append(drained, id)
		}
	}
	conn, err := adminConn(a.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admit := func(id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		_, err := concordv1.NewOperatorClient(conn).AdmitDrain(ctx, &concordv1.AdmitDrainRequest{NodeId: id, LeaseMs: time.Minute.Milliseconds()})
		return err
	}
	if err := admit(drained[0]); err != nil {
		t.Fatalf("admit the drain of %s on leader %s: %v", drained[0], a, err)
	}
	if err := admit(drained[1]); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--min-quorum 3") {
		t.Fatalf("second voter's drain on %s: %v, want FAILED_PRECONDITION naming --min-quorum 3", a, err)
	}
	for _, n := range c.Running() {
		if adm, _ := n.Server().Registry().(*registry.State).DrainAdmissions(); len(adm) != 0 {
			t.Fatalf("%s holds drain admissions %+v below their level", n, adm)
		}
	}
}
