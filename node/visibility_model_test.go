package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
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
}

type vmScope struct {
	id, owner, vis string
	members        map[string]bool
}

type vmParticipant struct {
	id, ptype string
	conns     []*client // one per node
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

func (w *vmWorld) seesAgent(p *vmParticipant, a *vmAgent) bool {
	switch {
	case p.ptype == "system" || a.owner == p.id || a.vis == "public":
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

func (w *vmWorld) seesScope(p *vmParticipant, sc *vmScope) bool {
	switch {
	case p.ptype == "system" || sc.owner == p.id || sc.vis == "public":
		return true
	case sc.vis == "members":
		return w.ownsMember(p, sc)
	}
	return false
}

// TestCluster_VisibilityModel: random participants, agents, scopes and
// visibility settings; what each participant lists and replays, on each
// node, equals what the reference model allows.
func TestCluster_VisibilityModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
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
			c := dial(t, srv)
			params := map[string]any{"protocolVersion": 1, "participantType": p.ptype, "participantId": p.id,
				"auth": map[string]any{"method": "api-key", "token": res.GetToken()}}
			eventually(t, 10*time.Second, func() error { return tryCall(c, "map/connect", params) })
			p.conns = append(p.conns, c)
		}
	}
	w := &vmWorld{agents: map[string]*vmAgent{}, scopes: map[string]*vmScope{}}
	agentVis := []string{"public", "parent-only", "scope", "system"}
	scopeVis := []string{"public", "members", "system"}
	n := 0
	for _, p := range ps[:3] { // agent participants build the world
		for range 3 {
			n++
			a := &vmAgent{id: fmt.Sprintf("a%d", n), owner: p.id, vis: agentVis[rng.IntN(len(agentVis))], scopes: map[string]bool{}}
			params := map[string]any{"agentId": a.id, "visibility": a.vis}
			if ids := sortedKeys(w.agents); len(ids) > 0 && rng.IntN(2) == 0 {
				a.parent = ids[rng.IntN(len(ids))]
				params["parent"] = a.parent
			}
			p.conns[rng.IntN(2)].call("map/agents/register", params)
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
	waitApplied(t, servers)
	for _, p := range ps {
		var wantAgents, wantScopes []string
		for _, id := range sortedKeys(w.agents) {
			if w.seesAgent(p, w.agents[id]) {
				wantAgents = append(wantAgents, id)
			}
		}
		for _, id := range sortedKeys(w.scopes) {
			if w.seesScope(p, w.scopes[id]) {
				wantScopes = append(wantScopes, id)
			}
		}
		for i, c := range p.conns {
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
