package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// vmAgent and vmScope are the reference model's view of the world.
type vmAgent struct {
	id, owner, parent, vis string
	scopes                 map[string]bool
	conn                   int    // the connection (node) that registered it: its session
	see                    vmRule // permissionOverrides.canSee.agents
}

// vmRule is a canSee.agents rule: "" (all), hierarchy, direct, or
// include (ids).
type vmRule struct {
	kind string
	ids  []string
}

func (r vmRule) json() map[string]any {
	var v any = r.kind
	if r.kind == "include" {
		v = map[string]any{"include": r.ids}
	}
	return map[string]any{"canSee": map[string]any{"agents": v}}
}

type vmScope struct {
	id, owner, vis string
	members        map[string]bool
}

type vmParticipant struct {
	id, ptype string
	client    vmRule        // client visibility of agents (layer 2): "" (all), none, include
	conns     []*client     // one per node
	events    []chan string // per connection: agent ids of agent_* map/event notifications
}

// vmWorld is a small reference model of map-protocol.md §7, written
// independently of node/access.
type vmWorld struct {
	agents map[string]*vmAgent
	scopes map[string]*vmScope
}

func (w *vmWorld) ownsAgent(p *vmParticipant, id string) bool {
	a := w.agents[id]
	return a != nil && a.owner == p.id
}

func (w *vmWorld) ownsMember(p *vmParticipant, sc *vmScope) bool {
	for m := range sc.members {
		if w.ownsAgent(p, m) {
			return true
		}
	}
	return false
}

// seesAgent: p, connected through conns[conn], may see a.
func (w *vmWorld) seesAgent(p *vmParticipant, conn int, a *vmAgent) bool {
	switch {
	case p.ptype == "system" || a.owner == p.id:
		return true
	case p.client.kind == "none" || p.client.kind == "include" && !slices.Contains(p.client.ids, a.id):
		return false
	case !w.layerAllows(p, conn, a):
		return false
	case a.vis == "public":
		return true
	case a.vis == "parent-only":
		return a.parent != "" && w.ownsAgent(p, a.parent)
	case a.vis == "scope":
		for s := range a.scopes {
			if w.ownsMember(p, w.scopes[s]) {
				return true
			}
		}
	}
	return false
}

// layerAllows applies the canSee.agents rule of every agent p's session
// on conns[conn] registered: all of them must allow t.
func (w *vmWorld) layerAllows(p *vmParticipant, conn int, t *vmAgent) bool {
	for _, a := range w.agents {
		if a.owner != p.id || a.conn != conn {
			continue
		}
		switch a.see.kind {
		case "hierarchy":
			if !w.kin(a, t) {
				return false
			}
		case "direct":
			if a.id != t.id {
				return false
			}
		case "include":
			if a.id != t.id && !slices.Contains(a.see.ids, t.id) {
				return false
			}
		}
	}
	return true
}

// kin: a and t are the same agent, or one is an ancestor of the other.
func (w *vmWorld) kin(a, t *vmAgent) bool {
	up := func(x *vmAgent, anc string) bool {
		for x != nil && x.parent != "" {
			if x.parent == anc {
				return true
			}
			x = w.agents[x.parent]
		}
		return false
	}
	return a.id == t.id || up(a, t.id) || up(t, a.id)
}

func (w *vmWorld) seesScope(p *vmParticipant, sc *vmScope) bool {
	switch {
	case p.ptype == "system" || sc.owner == p.id || sc.vis == "public":
		return true
	case sc.vis == "members":
		return w.ownsMember(p, sc)
	}
	return false
}

// TestCluster_VisibilityModel: random participants, agents, scopes,
// visibility settings, agent permission layers (canSee.agents) and client
// visibility of agents (map/permissions/update); what
// each participant lists, gets, replays and receives on a live
// subscription, on each node, equals what the reference model allows.
func TestCluster_VisibilityModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CONCORD_VM_SEED"); s != "" { // reproduce a failure
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (CONCORD_VM_SEED reproduces it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b9))
	servers := startCluster(t, 2)
	waitLeader(t, servers)

	var ps []*vmParticipant
	for i := range 5 {
		ptype := "agent"
		switch i {
		case 3:
			ptype = "client"
		case 4:
			ptype = "system"
		}
		ps = append(ps, &vmParticipant{id: fmt.Sprintf("vm-%s-%d", ptype, i), ptype: ptype})
	}
	for _, p := range ps {
		res, err := servers[0].ACLAdmin().CreateToken(context.Background(), &concordv1.AclCreateTokenRequest{
			ParticipantIdPattern: p.id, ParticipantTypes: []string{p.ptype}})
		if err != nil {
			t.Fatal(err)
		}
		for _, srv := range servers {
			evs := make(chan string, 256)
			c := dialWith(t, srv, notifyFunc(func(method string, params json.RawMessage) {
				var ev struct {
					Event struct {
						Data struct{ Agent, Scope struct{ ID string } }
					}
				}
				if method == "map/event" && json.Unmarshal(params, &ev) == nil {
					evs <- ev.Event.Data.Agent.ID + ev.Event.Data.Scope.ID
				}
			}))
			p.events = append(p.events, evs)
			params := map[string]any{"protocolVersion": 1, "participantType": p.ptype, "participantId": p.id,
				"auth": map[string]any{"method": "api-key", "token": res.GetToken()}}
			eventually(t, 10*time.Second, func() error { return tryCall(c, "map/connect", params) })
			p.conns = append(p.conns, c)
		}
	}
	w := &vmWorld{agents: map[string]*vmAgent{}, scopes: map[string]*vmScope{}}
	agentVis := []string{"public", "parent-only", "scope", "system"}
	scopeVis := []string{"public", "members", "system"}
	// Ids a canSee include list may name: agents and the probes below.
	pool := []string{"a1", "a2", "a3", "a4", "a5", "a6", "a7", "a9", "a10", "pr1", "pr2", "pr3", "pr4", "pr5", "pr6"}
	n := 0
	for _, p := range ps[:3] { // agent participants build the world
		for range 3 {
			n++
			a := &vmAgent{id: fmt.Sprintf("a%d", n), owner: p.id, vis: agentVis[rng.IntN(len(agentVis))], scopes: map[string]bool{},
				conn: rng.IntN(2)}
			params := map[string]any{"agentId": a.id, "visibility": a.vis}
			if ids := sortedKeys(w.agents); len(ids) > 0 && rng.IntN(2) == 0 {
				a.parent = ids[rng.IntN(len(ids))]
				params["parent"] = a.parent
				a.see = w.agents[a.parent].see // a restricted parent's children inherit its permissions
			} else {
				switch rng.IntN(4) {
				case 1:
					a.see = vmRule{kind: "hierarchy"}
				case 2:
					a.see = vmRule{kind: "direct"}
				case 3:
					a.see = vmRule{kind: "include", ids: []string{pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))]}}
				}
				if a.see.kind != "" {
					params["permissionOverrides"] = a.see.json()
				}
			}
			p.conns[a.conn].call("map/agents/register", params)
			w.agents[a.id] = a
		}
		n++
		sc := &vmScope{id: fmt.Sprintf("s%d", n), owner: p.id, vis: scopeVis[rng.IntN(len(scopeVis))], members: map[string]bool{}}
		p.conns[rng.IntN(2)].call("map/scopes/create", map[string]any{"scopeId": sc.id, "visibility": sc.vis})
		w.scopes[sc.id] = sc
	}
	// Each agent participant tries to put its agents in random scopes: it
	// succeeds exactly when the model says it can see the scope.
	for _, p := range ps[:3] {
		for _, aid := range sortedKeys(w.agents) {
			a := w.agents[aid]
			if a.owner != p.id || rng.IntN(2) == 0 {
				continue
			}
			sids := sortedKeys(w.scopes)
			sc := w.scopes[sids[rng.IntN(len(sids))]]
			c := p.conns[rng.IntN(2)]
			waitApplied(t, servers)
			err := tryCall(c, "map/scopes/join", map[string]any{"scopeId": sc.id, "agentId": a.id})
			if want := w.seesScope(p, sc); (err == nil) != want {
				t.Fatalf("%s joins %s to %s (vis %s, owner %s): err %v, model allows %v", p.id, a.id, sc.id, sc.vis, sc.owner, err, want)
			}
			if err == nil {
				sc.members[a.id], a.scopes[sc.id] = true, true
			}
		}
	}
	// The system narrows the client's and one agent participant's client
	// visibility of agents (map/permissions/update, through either node).
	for _, p := range []*vmParticipant{ps[3], ps[rng.IntN(3)]} {
		switch rng.IntN(3) {
		case 0:
			p.client = vmRule{kind: "none"}
		case 1:
			p.client = vmRule{kind: "include", ids: []string{pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))]}}
		}
		var rule any = "all"
		switch p.client.kind {
		case "none":
			rule = "none"
		case "include":
			rule = map[string]any{"include": p.client.ids}
		}
		ps[4].conns[rng.IntN(2)].call("map/permissions/update", map[string]any{"clientId": p.id,
			"permissions": map[string]any{"visibility": map[string]any{"agents": rule}}})
	}
	waitApplied(t, servers)
	for _, p := range ps {
		var wantScopes []string
		for _, id := range sortedKeys(w.scopes) {
			if w.seesScope(p, w.scopes[id]) {
				wantScopes = append(wantScopes, id)
			}
		}
		for i, c := range p.conns {
			var wantAgents []string
			for _, id := range sortedKeys(w.agents) {
				if w.seesAgent(p, i, w.agents[id]) {
					wantAgents = append(wantAgents, id)
				}
			}
			got := listIDs(c.call("map/agents/list", map[string]any{}), "agents")
			if !slices.Equal(got, wantAgents) {
				t.Errorf("%s on n%d lists agents %v, model %v", p.id, i+1, got, wantAgents)
			}
			if p.ptype != "agent" && p.ptype != "client" && p.ptype != "system" {
				continue
			}
			if got := listIDs(c.call("map/scopes/list", map[string]any{}), "scopes"); !slices.Equal(got, wantScopes) {
				t.Errorf("%s on n%d lists scopes %v, model %v", p.id, i+1, got, wantScopes)
			}
			rep := c.call("map/replay", map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered"}}, "limit": 1000})
			if got := replayedAgents(rep); !slices.Equal(got, wantAgents) {
				t.Errorf("%s on n%d replays agent_registered for %v, model %v", p.id, i+1, got, wantAgents)
			}
			for _, id := range sortedKeys(w.agents) {
				err := tryCall(c, "map/agents/get", map[string]any{"agentId": id})
				if visible := slices.Contains(wantAgents, id); visible != (err == nil) {
					t.Errorf("%s on n%d gets %s: err %v, model visible %v", p.id, i+1, id, err, visible)
				}
			}
		}
	}
	checkLiveEvents(t, rng, w, ps, ps[4])
	if t.Failed() {
		for _, id := range sortedKeys(w.agents) {
			a := w.agents[id]
			t.Logf("world: %s owner=%s conn=%d parent=%q vis=%s see=%v scopes=%v", a.id, a.owner, a.conn, a.parent, a.vis, a.see, sortedKeys(a.scopes))
		}
		for _, p := range ps {
			t.Logf("participant %s client visibility %v", p.id, p.client)
		}
	}
}

// checkLiveEvents subscribes every connection to agent_registered, has
// the system participant register probes (random visibility and parent),
// and checks each subscriber receives exactly the probes the model lets
// it see, on both nodes. The world is frozen meanwhile, so the model's
// answer does not depend on when each event is delivered.
func checkLiveEvents(t *testing.T, rng *rand.Rand, w *vmWorld, ps []*vmParticipant, sys *vmParticipant) {
	type sink struct {
		p    *vmParticipant
		conn int
		got  chan string
	}
	var sinks []*sink
	for _, p := range ps {
		for i, c := range p.conns {
			c.call("map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": []string{"agent_registered", "scope_created"}}})
			sinks = append(sinks, &sink{p: p, conn: i, got: p.events[i]})
		}
	}
	agentVis := []string{"public", "parent-only", "scope", "system"}
	ids := sortedKeys(w.agents)
	for i := range 6 {
		pr := &vmAgent{id: fmt.Sprintf("pr%d", i+1), owner: sys.id, vis: agentVis[rng.IntN(len(agentVis))], scopes: map[string]bool{}}
		params := map[string]any{"agentId": pr.id, "visibility": pr.vis}
		if rng.IntN(3) > 0 {
			pr.parent = ids[rng.IntN(len(ids))]
			params["parent"] = pr.parent
		}
		sys.conns[rng.IntN(2)].call("map/agents/register", params)
		w.agents[pr.id] = pr
	}
	// The end marker is a public scope: no canSee.agents rule hides it.
	sys.conns[0].call("map/scopes/create", map[string]any{"scopeId": "zz-end"})
	for _, sk := range sinks {
		var want, got []string
		for i := range 6 {
			if id := fmt.Sprintf("pr%d", i+1); w.seesAgent(sk.p, sk.conn, w.agents[id]) {
				want = append(want, id)
			}
		}
		for done := false; !done; {
			select {
			case id := <-sk.got:
				if id == "zz-end" {
					done = true
				} else {
					got = append(got, id)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s on n%d: the end marker never arrived (got %v)", sk.p.id, sk.conn+1, got)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s on n%d received live agent_registered for %v, model %v", sk.p.id, sk.conn+1, got, want)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listIDs(res map[string]any, key string) []string {
	var out []string
	items, _ := res[key].([]any)
	for _, it := range items {
		out = append(out, it.(map[string]any)["id"].(string))
	}
	sort.Strings(out)
	return out
}

func replayedAgents(res map[string]any) []string {
	var out []string
	evs, _ := res["events"].([]any)
	for _, e := range evs {
		b, _ := json.Marshal(e)
		var ev struct {
			Event struct {
				Data struct {
					Agent struct{ ID string }
				}
			}
		}
		_ = json.Unmarshal(b, &ev)
		out = append(out, ev.Event.Data.Agent.ID)
	}
	sort.Strings(out)
	return out
}

// tryCall calls method and returns its error, if any.
func tryCall(c *client, method string, params any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.conn.Call(ctx, method, params)
	var re *rpc.Error
	if errors.As(err, &re) {
		return re
	}
	return err
}

// waitLeader waits until every node knows a leader.
func waitLeader(t *testing.T, servers []*node.Server) {
	t.Helper()
	agreedLeader(t, servers)
}

// waitApplied waits until every node applied the leader's last index, so
// reads on any node see every write made so far.
func waitApplied(t *testing.T, servers []*node.Server) {
	t.Helper()
	var last uint64
	for _, s := range servers {
		last = max(last, s.Store().AppliedIndex())
	}
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Store().WaitApplied(ctx, last)
		cancel()
		if err != nil {
			t.Fatalf("wait applied: %v", err)
		}
	}
}
