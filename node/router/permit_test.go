package router

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// fakePerms: the sender "w1" may not message "w2"; "mgr" refuses everyone
// (its permissionOverrides mark it restricted); nobody may message scope
// "quiet". It counts MayMessage calls.
type fakePerms struct{ calls int }

func (p *fakePerms) SenderRestricted(from Sender) bool { return from.AgentID == "w1" }
func (p *fakePerms) MayMessage(from Sender, to *registry.Agent) bool {
	p.calls++
	return to.ID != "mgr" && !(from.AgentID == "w1" && to.ID == "w2")
}
func (p *fakePerms) MaySendToScope(from Sender, sc *registry.Scope) bool { return sc.ID != "team" }
func (p *fakePerms) AcceptsFromSystem(system string, to *registry.Agent) bool {
	return system == "friend"
}

func TestSend_Permissions(t *testing.T) {
	reg, conns := world()
	for i := range reg.agents {
		if reg.agents[i].ID == "mgr" {
			reg.agents[i].PermissionOverrides = json.RawMessage(`{"acceptsFrom":{"agents":"hierarchy"}}`)
		}
	}
	perms := &fakePerms{}
	r := testRouter(t, reg, conns, nil, nil)
	r.perms = perms
	send := func(from Sender, to string) (*SendResult, error) {
		res, err := r.Send(context.Background(), from, json.RawMessage(`{"to":`+to+`,"payload":1}`))
		if err != nil {
			return nil, err
		}
		return res.(*SendResult), nil
	}
	code := func(err error) int {
		var re *rpc.Error
		if errors.As(err, &re) {
			return re.Code
		}
		return 0
	}
	if _, err := send(agentSender("w1"), `{"agent":"w2"}`); code(err) != rpc.CodePermissionDenied {
		t.Fatalf("direct send refused by canMessage: %v", err)
	}
	if _, err := send(agentSender("w3"), `"mgr"`); code(err) != rpc.CodePermissionDenied {
		t.Fatalf("direct send refused by acceptsFrom: %v", err)
	}
	if _, err := send(agentSender("w1"), `{"scope":"team"}`); code(err) != rpc.CodePermissionDenied {
		t.Fatalf("scope send refused by canMessage.scopes: %v", err)
	}
	// A group send delivers to the others and reports the refused ones.
	res, err := send(agentSender("w3"), `{"agents":["w1","mgr"]}`)
	if err != nil || len(res.Delivered) != 1 || res.Delivered[0] != "w1" || len(res.Failed) != 1 {
		t.Fatalf("group send: %+v %v", res, err)
	}
	if b, _ := json.Marshal(res.Failed[0]); !strings.Contains(string(b), reasonNotPermitted) {
		t.Fatalf("refused recipient reported as %s", b)
	}
	// An unrestricted sender to unrestricted recipients costs no check.
	perms.calls = 0
	if _, err := send(agentSender("boss"), `{"agents":["w1","w2","w3"]}`); err != nil || perms.calls != 0 {
		t.Fatalf("free send: err %v, %d permission checks", err, perms.calls)
	}
}

// TestDeliverAgent_AcceptsFromSystems: a federated message to an agent
// with permissions goes through its acceptsFrom.systems.
func TestDeliverAgent_AcceptsFromSystems(t *testing.T) {
	reg, conns := world()
	for i := range reg.agents {
		if reg.agents[i].ID == "mgr" {
			reg.agents[i].PermissionOverrides = json.RawMessage(`{"acceptsFrom":{"systems":{"include":["friend"]}}}`)
		}
	}
	r := testRouter(t, reg, conns, nil, nil)
	r.perms = &fakePerms{}
	var got []error
	done := func(err error) { got = append(got, err) }
	r.DeliverAgent(context.Background(), "mgr", json.RawMessage(`{"id":"m1","from":"friend:agent:x","to":{"agent":"mgr"}}`), done)
	r.DeliverAgent(context.Background(), "mgr", json.RawMessage(`{"id":"m2","from":"foe:agent:y","to":{"agent":"mgr"}}`), done)
	r.DeliverAgent(context.Background(), "w1", json.RawMessage(`{"id":"m3","from":"foe:agent:y","to":{"agent":"w1"}}`), done) // no permissions
	var ce *federation.CodeError
	if got[0] != nil || !errors.As(got[1], &ce) || ce.Code != rpc.CodePermissionDenied || got[2] != nil {
		t.Fatalf("outcomes %v", got)
	}
}

// rolePerms adds rolePermissions to fakePerms: agents of role "manager"
// are restricted without overrides of their own.
type rolePerms struct{ fakePerms }

func (p *rolePerms) RoleRestricted(role string) bool { return role == "manager" }

// TestSend_RolePermissions: a recipient whose role has permissions is
// checked even without overrides; recipients of other roles cost no check.
func TestSend_RolePermissions(t *testing.T) {
	reg, conns := world()
	perms := &rolePerms{}
	r := testRouter(t, reg, conns, nil, nil)
	r.perms = perms
	res, err := r.Send(context.Background(), agentSender("boss"), json.RawMessage(`{"to":{"agents":["w1","mgr"]},"payload":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if sr := res.(*SendResult); len(sr.Delivered) != 1 || sr.Delivered[0] != "w1" || len(sr.Failed) != 1 || perms.calls != 1 {
		t.Fatalf("send: %+v, %d checks; want mgr refused by its role after one check", sr, perms.calls)
	}
}
