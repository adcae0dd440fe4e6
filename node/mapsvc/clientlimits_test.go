package mapsvc

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/access"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	"github.com/concordmap/concord/raftstore"
)

// fakeClientPerms is a settable ParticipantPermissions.
type fakeClientPerms struct {
	mu     sync.Mutex
	denied map[string][]string
	limits map[string]map[string]int64
	vis    map[string]*access.ClientVisibility
}

func (f *fakeClientPerms) Denied(pid string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.denied[pid]
}

func (f *fakeClientPerms) Limits(pid string) map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limits[pid]
}

func (f *fakeClientPerms) Visibility(pid string) *access.ClientVisibility {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vis[pid]
}

func (f *fakeClientPerms) set(pid string, denied []string, limits map[string]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.denied[pid], f.limits[pid] = denied, limits
}

// TestClientPermissions_Actions: a withdrawn action refuses every method
// that is that action with 1003 naming it, writes nothing, and leaves
// other participants and other actions alone.
func TestClientPermissions_Actions(t *testing.T) {
	cp := &fakeClientPerms{denied: map[string][]string{}, limits: map[string]map[string]int64{}}
	e := newEnv(t, func(c *Config) { c.ParticipantPermissions = cp })
	bob, eve := e.dial(), e.dial()
	connectAs(bob, TypeAgent, map[string]any{"participantId": "bob"})
	connectAs(eve, TypeAgent, map[string]any{"participantId": "eve"})
	bob.must("map/agents/register", `{"agentId":"b1"}`)
	bob.must("map/scopes/create", `{"scopeId":"s1"}`)

	cases := []struct {
		action, method, params string
	}{
		{ActionRegisterAgents, "map/agents/register", `{"agentId":"b2"}`},
		{ActionUnregisterAgents, "map/agents/unregister", `{"agentId":"b1"}`},
		{ActionCreateScopes, "map/scopes/create", `{"scopeId":"s2"}`},
		{ActionDeleteScopes, "map/scopes/delete", `{"scopeId":"s1"}`},
		{ActionModifyScopes, "map/scopes/join", `{"scopeId":"s1","agentId":"b1"}`},
		{ActionSteerAgents, "map/agents/stop", `{"agentId":"b1"}`},
		{ActionSendMessages, "map/send", `{"to":{"agent":"b1"},"payload":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.action, func(t *testing.T) {
			cp.set("bob", []string{"actions." + tc.action}, nil)
			err := bob.fails(tc.method, tc.params, rpc.CodePermissionDenied)
			if err.Data.Details["action"] != tc.action {
				t.Fatalf("%s: details %v do not name action %s", tc.method, err.Data.Details, tc.action)
			}
			e.refused(bob, tc.method, tc.params, rpc.CodePermissionDenied)
			// Another participant is not affected.
			if tc.action == ActionRegisterAgents {
				eve.must("map/agents/register", `{"agentId":"e1"}`)
			}
			cp.set("bob", nil, nil)
		})
	}
	// A withdrawn action on an agent that does not exist still says 2001.
	cp.set("bob", []string{"actions." + ActionSteerAgents}, nil)
	bob.fails("map/agents/stop", `{"agentId":"ghost"}`, rpc.CodeAgentNotFound)
}

// TestClientPermissions_Limits: count limits answer 4002 once reached,
// messagesPerMinute answers 4001 and recovers as the window slides.
func TestClientPermissions_Limits(t *testing.T) {
	cp := &fakeClientPerms{denied: map[string][]string{}, limits: map[string]map[string]int64{}}
	e := newEnv(t, func(c *Config) { c.ParticipantPermissions = cp })
	bob := e.dial()
	connectAs(bob, TypeAgent, map[string]any{"participantId": "bob"})

	cp.set("bob", nil, map[string]int64{LimitAgentsRegistered: 1, LimitScopesCreated: 1, LimitSubscriptions: 0})
	bob.must("map/agents/register", `{"agentId":"b1"}`)
	err := bob.fails("map/agents/register", `{"agentId":"b2"}`, rpc.CodeQuotaExceeded)
	if err.Data.Details["limit"] != LimitAgentsRegistered {
		t.Fatalf("details %v", err.Data.Details)
	}
	bob.must("map/scopes/create", `{"scopeId":"s1"}`)
	e.refused(bob, "map/scopes/create", `{"scopeId":"s2"}`, rpc.CodeQuotaExceeded)
	e.refused(bob, "map/subscribe", `{}`, rpc.CodeQuotaExceeded)
	// Unregistering frees a slot.
	bob.must("map/agents/unregister", `{"agentId":"b1"}`)
	bob.must("map/agents/register", `{"agentId":"b2"}`)

	cp.set("bob", nil, map[string]int64{LimitMessagesPerMinute: 3})
	send := `{"to":{"agent":"b2"},"payload":1}`
	for i := 0; i < 3; i++ {
		bob.must("map/send", send)
	}
	if err := bob.fails("map/send", send, rpc.CodeRateLimited); err.Data.Details["limit"] != LimitMessagesPerMinute {
		t.Fatalf("details %v", err.Data.Details)
	}
	e.clock.Advance(2 * time.Minute)
	bob.must("map/send", send)
}

func TestRateWindows(t *testing.T) {
	t0 := time.UnixMilli(1_750_000_000_000)
	tests := []struct {
		name  string
		max   int64
		at    []time.Duration // offsets of attempts
		allow []bool
	}{
		{"zero refuses all", 0, []time.Duration{0}, []bool{false}},
		{"burst then refuse", 2, []time.Duration{0, time.Second, 2 * time.Second}, []bool{true, true, false}},
		{"previous minute still weighs", 2, []time.Duration{0, 0, 70 * time.Second, 71 * time.Second}, []bool{true, true, true, false}},
		{"previous minute fades", 2, []time.Duration{0, time.Second, 119 * time.Second}, []bool{true, true, true}},
		{"idle resets", 1, []time.Duration{0, 3 * time.Minute}, []bool{true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r rateWindows
			for i, off := range tc.at {
				if got := r.allow("p", tc.max, t0.Add(off)); got != tc.allow[i] {
					t.Fatalf("attempt %d at +%v: allow=%v, want %v", i, off, got, tc.allow[i])
				}
			}
		})
	}
}

// TestPermissionsUpdate_ClientPermissionRefusals: actions and limits are
// validated before anything is proposed.
func TestPermissionsUpdate_ClientPermissionRefusals(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ParticipantPermissions = fakeCeilings{} })
	sys := e.dial()
	connectAs(sys, TypeSystem, map[string]any{"participantId": "ops"})
	for _, tc := range []struct{ params, field string }{
		{`{"clientId":"bob","permissions":{"actions":{"fly":false}}}`, "permissions.actions.fly"},
		{`{"clientId":"bob","permissions":{"actions":true}}`, "permissions.actions"},
		{`{"clientId":"bob","permissions":{"limits":{"cats":1}}}`, "permissions.limits.cats"},
		{`{"clientId":"bob","permissions":{"limits":{"subscriptions":-1}}}`, "permissions.limits.subscriptions"},
		{`{"clientId":"bob","permissions":{"limits":{"subscriptions":1e12}}}`, "permissions.limits"},
		{`{"clientId":"bob","permissions":{"limits":[1]}}`, "permissions.limits"},
	} {
		e.refused(sys, "map/permissions/update", tc.params, rpc.CodeInvalidParams, tc.field)
	}
}

// TestClientPermissions_Visibility: client visibility filters list, get
// and the graph of the participant's open session.
func TestClientPermissions_Visibility(t *testing.T) {
	cp := &fakeClientPerms{denied: map[string][]string{}, limits: map[string]map[string]int64{}, vis: map[string]*access.ClientVisibility{}}
	e := newEnv(t, func(c *Config) { c.ParticipantPermissions = cp })
	ann, bob := e.dial(), e.dial()
	connectAs(ann, TypeAgent, map[string]any{"participantId": "ann"})
	connectAs(bob, TypeClient, map[string]any{"participantId": "bob"})
	ann.must("map/agents/register", `{"agentId":"lead","role":"lead"}`)
	ann.must("map/agents/register", `{"agentId":"w1","role":"worker","parent":"lead"}`)
	if got := ids(bob.must("map/agents/list", nil)["agents"]); len(got) != 2 {
		t.Fatalf("unrestricted bob lists %v", got)
	}
	if edges := bob.must("map/structure/graph", nil)["edges"].([]any); len(edges) != 1 {
		t.Fatalf("unrestricted bob sees edges %v", edges)
	}
	v, err := access.ParseClientVisibility([]byte(`{"agents":{"roles":["worker"]},"structure":false}`))
	if err != nil {
		t.Fatal(err)
	}
	cp.mu.Lock()
	cp.vis["bob"] = &v
	cp.mu.Unlock()
	if got := ids(bob.must("map/agents/list", nil)["agents"]); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("bob restricted to workers lists %v", got)
	}
	bob.fails("map/agents/get", `{"agentId":"lead"}`, rpc.CodeAgentNotFound)
	if edges := bob.must("map/structure/graph", nil)["edges"].([]any); len(edges) != 0 {
		t.Fatalf("structure:false still shows edges %v", edges)
	}
	if got := ids(ann.must("map/agents/list", nil)["agents"]); len(got) != 2 {
		t.Fatalf("another participant is narrowed too: %v", got)
	}
}

// TestRolePermissions: the server's rolePermissions[role] restrict an
// agent of that role, and its own permissionOverrides replace them key by
// key.
func TestRolePermissions(t *testing.T) {
	rcfg := registry.DefaultConfig()
	rcfg.RolePermissions = map[string]json.RawMessage{"worker": json.RawMessage(`{"canSee":{"agents":"hierarchy"}}`)}
	reg, err := registry.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, reg, raftstore.NewTestStore(t, reg), "n1")
	ann, wk, free := e.dial(), e.dial(), e.dial()
	connectAs(ann, TypeAgent, map[string]any{"participantId": "ann"})
	connectAs(wk, TypeAgent, map[string]any{"participantId": "wk"})
	connectAs(free, TypeAgent, map[string]any{"participantId": "free"})
	ann.must("map/agents/register", `{"agentId":"lead"}`)
	ann.must("map/agents/register", `{"agentId":"other"}`)
	wk.must("map/agents/register", `{"agentId":"w","role":"worker","parent":"lead"}`)
	free.must("map/agents/register", `{"agentId":"f","role":"worker","permissionOverrides":{"canSee":{"agents":"all"}}}`)
	if got := ids(wk.must("map/agents/list", nil)["agents"]); len(got) != 2 || got[0] != "lead" || got[1] != "w" {
		t.Fatalf("worker role lists %v, want [lead w]", got)
	}
	if got := ids(free.must("map/agents/list", nil)["agents"]); len(got) != 4 {
		t.Fatalf("worker with an override lists %v, want all four", got)
	}
}
