package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestSessionWrites_LateUpdateForwardRefused: an agent's state update
// from its connection on a node cut off from the leader is on the wire
// (the forward stream blackholed, not closed), so the client is told
// "outcome unknown, retry" while the bytes wait; the client resumes its
// session on the leader and sets the state it wants now; then the network
// heals and the held update reaches the leader and commits, after both.
// It quotes the attach epoch of its connection, which the session has
// left: every replica refuses it, and the agent keeps the state its
// client set last (without the precondition it would flip back to the
// stale one).
func TestSessionWrites_LateUpdateForwardRefused(t *testing.T) {
	c := New(t, 3)
	l, a2 := lateWriteAfterResume(t, c, "agent", func(x *Client) error {
		_, err := x.Call("map/agents/update", map[string]any{"agentId": "x", "state": "busy"})
		return err
	})
	if _, err := a2.Call("map/agents/update", map[string]any{"agentId": "x", "state": "idle"}); err != nil {
		t.Fatalf("update on %s: %s", l, Describe(err))
	}
	healAndWaitCommit(t, c, l)
	idle := func() error {
		for _, n := range c.Running() {
			a, ok := n.Server().Registry().Agent("x")
			if !ok || a.State != "idle" || a.HomeNode != l.ID || a.OwnerID != "x" {
				return fmt.Errorf("%s: agent x registered %v, state %q, home %q, owner %q; want idle on %s", n, ok, a.State, a.HomeNode, a.OwnerID, l)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, idle)
	consistently(t, 3*time.Second, idle)
	c.RequireInvariants(t)
}

// TestSessionWrites_LateSubscribeForwardRefused: the same with a
// map/subscribe. The client, told the outcome is unknown, resumed on the
// leader without subscribing again; the held SUBSCRIPTION_ADD must not give
// its session a subscription nobody delivers and the client never got an
// id for.
func TestSessionWrites_LateSubscribeForwardRefused(t *testing.T) {
	c := New(t, 3)
	var sid string
	l, _ := lateWriteAfterResume(t, c, "client", func(x *Client) error {
		sid = x.Session().SessionID
		_, err := x.Subscribe(map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}})
		return err
	})
	healAndWaitCommit(t, c, l)
	none := func() error {
		for _, n := range c.Running() {
			s, ok := n.Server().Registry().Session(sid)
			if !ok || !s.Connected || s.HomeNode != l.ID || len(s.Subscriptions) != 0 {
				return fmt.Errorf("%s: session %s found %v, connected %v on %q, subscriptions %v; want attached to %s with none",
					n, sid, ok, s.Connected, s.HomeNode, s.Subscriptions, l)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, none)
	consistently(t, 3*time.Second, none)
	c.RequireInvariants(t)
}

// lateWriteAfterResume connects a participant x (an agent registers
// itself) through a follower, cuts that follower from the leader while
// write (x's request there) is forwarded, so the client is told "outcome
// unknown" while the bytes wait on the cut, and resumes x's session on the
// leader. It returns the leader and the resumed client; the network is
// still cut.
func lateWriteAfterResume(t *testing.T, c *Cluster, ptype string, write func(x *Client) error) (*Node, *Client) {
	t.Helper()
	return lateWriteAfterResumeAs(t, c, lateWrite{connect: map[string]any{"participantType": ptype, "participantId": "x"}, write: write})
}

// lateWrite is one scenario of lateWriteAfterResumeAs.
type lateWrite struct {
	// connect are x's connect params: participantType, participantId, a
	// credential.
	connect map[string]any
	// ready, optional, runs once x is connected (an agent registered),
	// before the cut.
	ready func(x *Client)
	// write is x's request on the node cut from the leader.
	write func(x *Client) error
	// held says whether write's error is that of a request whose forward
	// the cut holds; nil: forwardHeld.
	held func(err error) bool
}

// forwardHeld is what a write whose forward the cut holds answers: the
// retryable outcome_unknown.
func forwardHeld(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && IsRetryable(err) && re.Data.Details["reason"] == "outcome_unknown"
}

// lateWriteAfterResumeAs is lateWriteAfterResume for the scenario w.
func lateWriteAfterResumeAs(t *testing.T, c *Cluster, w lateWrite) (*Node, *Client) {
	t.Helper()
	l := c.Leader(t)
	f := c.Followers(t)
	grace := map[string]any{"agentBehavior": "grace-period", "gracePeriodMs": time.Minute.Milliseconds()}
	params := map[string]any{"disconnectPolicy": grace}
	for k, v := range w.connect {
		params[k] = v
	}
	held := w.held
	if held == nil {
		held = forwardHeld
	}
	ptype, id := params["participantType"], params["participantId"].(string)
	// x connects through f[1] (and writes there): f[1]'s forward stream
	// to the leader is live, so the write below goes on it and the cut
	// holds it.
	x := c.Connect(t, f[1].Index, params)
	if ptype == "agent" {
		registerRetry(t, x, id, nil)
	}
	if w.ready != nil {
		w.ready(x)
	}
	sess := x.Session()
	// f[1] applies what it wrote before the cut: the write must not wait
	// for its read-your-writes fence there (it would time out, never sent).
	Eventually(t, ConvergeTimeout, func() error {
		if got, want := f[1].Store().AppliedIndex(), l.Store().AppliedIndex(); got < want {
			return fmt.Errorf("%s applied %d, the leader %d", f[1], got, want)
		}
		return nil
	})

	c.Net.Cut(f[1].ID, l.ID)
	if err := w.write(x); !held(err) {
		// no_leader: f[1] lost the leader before it forwarded (a machine
		// too slow for the raft timings), so nothing is on the wire.
		t.Fatalf("write on %s, its forward held: want its outcome unknown, got %s", f[1], Describe(err))
	}
	// The client gives up on f[1] and resumes on the leader.
	a2, err := Dial(t, l.MAPURL(), c.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	a2.SetToken(c.Token())
	params["sessionId"], params["resumeToken"] = sess.SessionID, sess.ResumeToken
	res, err := a2.Connect(params)
	if err != nil || !res.Reconnected {
		t.Fatalf("resume on %s: %+v, %s", l, res, Describe(err))
	}
	return l, a2
}

// healAndWaitCommit heals the network (the held write reaches the leader)
// and waits until the leader committed something since.
func healAndWaitCommit(t *testing.T, c *Cluster, l *Node) {
	t.Helper()
	before := l.Store().AppliedIndex()
	c.Net.Heal()
	Eventually(t, ConvergeTimeout, func() error {
		if n := l.Store().AppliedIndex(); n <= before {
			return fmt.Errorf("%s: nothing committed since the heal (applied %d)", l, n)
		}
		return nil
	})
}

// TestSessionWrites_LatePermissionsUpdateForwardRefused: the same with a
// system's map/permissions/update, whose state lives in the acl module
// (registry.FSMLevelModuleSessionWrites). The held update withdraws
// actions.sendMessages from bob; the client, told the outcome is unknown,
// resumed on the leader and set what it wants now (sendMessages allowed, a
// limit). The held update commits after both and must not withdraw the
// action behind the newer update's back.
func TestSessionWrites_LatePermissionsUpdateForwardRefused(t *testing.T) {
	c := New(t, 3)
	awaitFSMLevel(t, c, registry.FSMLevelModuleSessionWrites)
	update := func(x *Client, perms map[string]any) error {
		_, err := x.Call("map/permissions/update", map[string]any{"clientId": "bob", "permissions": perms})
		return err
	}
	l, a2 := lateWriteAfterResume(t, c, "system", func(x *Client) error {
		return update(x, map[string]any{"actions": map[string]any{"sendMessages": false}})
	})
	if err := update(a2, map[string]any{"actions": map[string]any{"sendMessages": true}, "limits": map[string]any{"messagesPerMinute": 7}}); err != nil {
		t.Fatalf("update on %s: %s", l, Describe(err))
	}
	healAndWaitCommit(t, c, l)
	allowed := func() error {
		for _, n := range c.Running() {
			p := n.Server().ParticipantPermissions()
			if d, lim := p.Denied("bob"), p.Limits("bob"); slices.Contains(d, "actions.sendMessages") || lim["messagesPerMinute"] != 7 {
				return fmt.Errorf("%s: bob denied %v, limits %v; want sendMessages allowed, messagesPerMinute 7", n, d, lim)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, allowed)
	consistently(t, 3*time.Second, allowed)
	c.RequireInvariants(t)
}

// awaitFSMLevel waits until every running node's proposers rely on FSM
// level level (every server advertises it and, from
// registry.FSMLevelSystemRecord on, the leader recorded it).
func awaitFSMLevel(t *testing.T, c *Cluster, level int) {
	t.Helper()
	Eventually(t, MembershipTimeout, func() error {
		for _, n := range c.Running() {
			if got := n.Server().FSMLevel(context.Background()); got < level {
				return fmt.Errorf("%s relies on FSM level %d, want %d", n, got, level)
			}
		}
		return nil
	})
}

// TestSessionWrites_LateGatewayBindForwardRefused: the same with a
// gateway's map/federation/route, whose bind of its source system to its
// session lives in the federation module (registry.FSMLevelModuleSessionWrites).
// The route's bind is held on the cut (the gateway told the route may have
// failed); the gateway resumes on the leader, and another gateway then
// routes for the same system, binding it. The held bind commits after both
// and must not take the system back to the first gateway's session.
func TestSessionWrites_LateGatewayBindForwardRefused(t *testing.T) {
	c := New(t, 3, WithSystem("dc1"), WithInsecure())
	awaitFSMLevel(t, c, registry.FSMLevelModuleSessionWrites)
	agentOn(t, c, c.Leader(t).Index, "bob", nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := c.Leader(t).Server().ACLAdmin().CreateToken(ctx, &concordv1.AclCreateTokenRequest{
		ParticipantIdPattern: "gw-lab*", ParticipantTypes: []string{"gateway"}, GatewaySources: []string{"lab"}, GatewayTargets: []string{"dc1"}})
	if err != nil {
		t.Fatal(err)
	}
	gateway := func(id string) map[string]any {
		return map[string]any{"participantType": "gateway", "participantId": id, "auth": map[string]any{"method": "api-key", "token": key.GetToken()}}
	}
	route := func(x *Client) error {
		msg := `{"id":"m","from":"alice","to":{"agent":"bob"},"payload":{"x":1}}`
		_, err := x.Call("map/federation/route", json.RawMessage(gatewayEnvelope("lab", "dc1", 0, "", `["lab"]`, msg)))
		return err
	}
	var first string
	l, _ := lateWriteAfterResumeAs(t, c, lateWrite{connect: gateway("gw-lab1"), write: func(x *Client) error {
		first = x.Session().SessionID
		return route(x)
	}, held: bindHeld})
	second := c.Connect(t, l.Index, gateway("gw-lab2"))
	if err := route(second); err != nil {
		t.Fatalf("route of the second gateway on %s: %s", l, Describe(err))
	}
	healAndWaitCommit(t, c, l)
	boundToSecond := func() error {
		for _, n := range c.Running() {
			gws := n.Server().Federation().Gateways()
			if len(gws) != 1 || gws[0].GetSystemId() != "lab" || gws[0].GetSessionId() != second.Session().SessionID {
				return fmt.Errorf("%s: gateway bindings %v; want lab bound to the second gateway's session %s (not the first's, %s)",
					n, gws, second.Session().SessionID, first)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, boundToSecond)
	consistently(t, 3*time.Second, boundToSecond)
	c.RequireInvariants(t)
}

// bindHeld is what a gateway's route answers when the forward of its bind
// is held: the retryable 5000 saying the route could not be recorded.
func bindHeld(err error) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == rpc.CodeFederationUnavailable && IsRetryable(err) &&
		strings.Contains(re.Message, "could not record the gateway's route")
}

// TestSessionWrites_LateRunReplyForwardRefused: the same with an agent's
// map/send answer to a consensus run task, whose state lives in the runs
// module (registry.FSMLevelModuleSessionWrites). The held answer (the
// agent gives up on the task) reaches the leader after the agent resumed
// there, still thinking it over: it must not settle the task behind the
// connection now holding the session, which then answers itself.
func TestSessionWrites_LateRunReplyForwardRefused(t *testing.T) {
	c := New(t, 3)
	awaitFSMLevel(t, c, registry.FSMLevelModuleSessionWrites)
	l := c.Leader(t)
	for _, id := range []string{"y", "z"} { // they never answer
		agentOn(t, c, l.Index, id, nil)
	}
	sys := c.Connect(t, l.Index, map[string]any{"participantType": "system"})
	rr := newRunRequestOf(t, "req-late-reply", "y", runTaskTimeoutMs, []string{"x", "y", "z"})
	var runID, taskID string
	answer := func(x *Client) error {
		_, err := x.Call("map/send", map[string]any{"to": map[string]any{"agent": "concord.runs"},
			"payload": map[string]any{"kind": "error", "error": "gave up"},
			"meta":    map[string]any{"isResult": true, "correlationId": taskID}})
		return err
	}
	l, a2 := lateWriteAfterResumeAs(t, c, lateWrite{
		connect: map[string]any{"participantType": "agent", "participantId": "x"},
		ready: func(x *Client) {
			raw, err := sys.Call("x-concord/runs/start", map[string]any{"request": rr.raw})
			if err != nil {
				t.Fatalf("start: %s", Describe(err))
			}
			var res struct {
				RunID string `json:"runId"`
			}
			_ = json.Unmarshal(raw, &res)
			runID = res.RunID
			msgs, err := x.WaitMessages(1, ConvergeTimeout)
			if err != nil {
				t.Fatalf("x's task: %v", err)
			}
			var meta struct {
				CorrelationID string `json:"correlationId"`
			}
			if json.Unmarshal(msgs[0].Meta, &meta) != nil || meta.CorrelationID == "" || runID == "" {
				t.Fatalf("run %q, task message %+v", runID, msgs[0])
			}
			taskID = meta.CorrelationID
		},
		write: answer,
	})
	healAndWaitCommit(t, c, l)
	observers := map[*Node]*Client{}
	for _, n := range c.Running() {
		observers[n] = c.Connect(t, n.Index, map[string]any{"participantType": "system"})
	}
	outstanding := func() error {
		for n, o := range observers {
			res, err := o.Call("x-concord/runs/get", map[string]any{"runId": runID, "include": []string{"state"}})
			if err != nil {
				return fmt.Errorf("%s: get %s: %s", n, runID, Describe(err))
			}
			if !strings.Contains(string(res), `"taskId":"`+taskID+`"`) {
				return fmt.Errorf("%s: task %s no longer outstanding: %s", n, taskID, res)
			}
		}
		return nil
	}
	Eventually(t, ConvergeTimeout, outstanding)
	consistently(t, 3*time.Second, outstanding)
	if err := answer(a2); err != nil {
		t.Fatalf("answer from the resumed connection on %s: %s", l, Describe(err))
	}
	c.RequireInvariants(t)
}
