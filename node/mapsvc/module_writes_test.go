package mapsvc

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// aclRecorder stands in for the acl module (which imports this package):
// it records each ACL_PERMISSIONS_UPDATE proposed and answers it; the
// other commands go to the store.
type aclRecorder struct {
	store *raftstore.Store
	mu    sync.Mutex
	seen  []*concordv1.AclPermissionsUpdate
}

func (r *aclRecorder) Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error) {
	if t != concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE {
		return r.store.Apply(ctx, t, m)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, proto.CloneOf(m.(*concordv1.AclPermissionsUpdate)))
	return nil, 0, nil
}

// TestModuleWrites_EpochGate: map/permissions/update quotes its
// connection's session and attach epoch only once every server enforces
// FSMLevelModuleSessionWrites (the level after the record's, so the
// record of it too); below it the update is proposed as before. map/send
// and the gateway methods hand the connection's epoch on (to node/runs
// and federation, which gate their own writes).
func TestModuleWrites_EpochGate(t *testing.T) {
	for _, level := range []int{registry.FSMLevelModuleSessionWrites - 1, registry.FSMLevelModuleSessionWrites} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			var rec *aclRecorder
			e := newEnv(t, func(c *Config) {
				rec = &aclRecorder{store: c.Store.(*raftstore.Store)}
				c.Store = rec
				c.FSMLevel = func(context.Context) int { return level }
				c.ParticipantPermissions = fakeCeilings{}
				c.Authenticator = gwAuth{}
			})
			key := map[string]any{"method": "api-key", "token": "sys"}
			c1 := e.dial()
			res := c1.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeSystem, "participantId": "ops", "auth": key})
			sid := res["sessionId"].(string)
			c2 := e.dial() // the session moves to c2: epoch 2
			c2.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeSystem, "participantId": "ops", "auth": key,
				"sessionId": sid, "resumeToken": res["resumeToken"]})
			c2.must("map/permissions/update", `{"clientId":"bob","permissions":{"actions":{"sendMessages":false}}}`)
			c2.must("map/send", `{"to":"concord.runs","payload":{}}`)

			wantSID, wantEpoch := "", uint64(0)
			if level >= registry.FSMLevelModuleSessionWrites {
				wantSID, wantEpoch = sid, 2
			}
			rec.mu.Lock()
			seen := rec.seen
			rec.mu.Unlock()
			if len(seen) != 1 || seen[0].GetOriginSessionId() != wantSID || seen[0].GetOriginSessionEpoch() != wantEpoch {
				t.Fatalf("proposed %v, want one update quoting session %q epoch %d", seen, wantSID, wantEpoch)
			}
			if sends := e.router.calls(); len(sends) != 1 || sends[0].from.SessionID != sid || sends[0].from.SessionEpoch != 2 {
				t.Fatalf("map/send handed the router %+v, want session %s at epoch 2", sends, sid)
			}
		})
	}
}

// TestGatewayCaller_CarriesEpoch: the gateway methods hand federation the
// attach epoch the connection holds, which a gateway bind quotes.
func TestGatewayCaller_CarriesEpoch(t *testing.T) {
	if got := gatewayCaller(&connState{sessionID: "s1", epoch: 3}); got.SessionID != "s1" || got.SessionEpoch != 3 {
		t.Fatalf("caller %+v, want session s1 at epoch 3", got)
	}
}

// federation answers a refused gateway bind with the reason this package
// gives the registry's refusals.
func TestReasonSessionMoved_SameForGateways(t *testing.T) {
	if federation.ReasonSessionMoved != ReasonSessionMoved || federation.CodeSessionMoved != registry.CodeExhausted {
		t.Fatalf("federation answers %d %q, mapsvc %d %q", federation.CodeSessionMoved, federation.ReasonSessionMoved, registry.CodeExhausted, ReasonSessionMoved)
	}
}

// TestModuleWrites_PermissionsUpdateFromMovedSession: an update from a
// connection whose session this replica already shows moved on (resumed
// by another connection) is refused here with the retryable 4000
// session_moved and proposes nothing; the acl module's apply would refuse
// it anyway.
func TestModuleWrites_PermissionsUpdateFromMovedSession(t *testing.T) {
	var rec *aclRecorder
	e := newEnv(t, func(c *Config) {
		rec = &aclRecorder{store: c.Store.(*raftstore.Store)}
		c.Store = rec
		c.FSMLevel = func(context.Context) int { return registry.FSMLevelModuleSessionWrites }
		c.ParticipantPermissions = fakeCeilings{}
		c.Authenticator = gwAuth{}
	})
	key := map[string]any{"method": "api-key", "token": "sys"}
	c1 := e.dial()
	res := c1.must("map/connect", map[string]any{"protocolVersion": 1, "participantType": TypeSystem, "participantId": "ops", "auth": key})
	// The session resumes on another node: c1's connection no longer holds it.
	s, _ := e.reg.Session(res["sessionId"].(string))
	if _, _, err := e.store.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, &concordv1.SessionOpenRequest{
		Meta:    &concordv1.CommandMeta{TimestampMs: 1, EventIds: []string{"ev-resume-n9"}, NodeId: "n9"},
		Session: &concordv1.SessionRecord{Id: s.ID, HomeNode: "n9", ResumeTokenHash: s.ResumeTokenHash}, Resume: true, ResumeFromEpoch: 1,
	}); err != nil {
		t.Fatal(err)
	}
	err := c1.fails("map/permissions/update", `{"clientId":"bob","permissions":{"actions":{"sendMessages":false}}}`, rpc.CodeExhausted)
	if !err.Data.Retryable || err.Data.Details["reason"] != ReasonSessionMoved {
		t.Fatalf("error data %+v, want retryable, reason %s", err.Data, ReasonSessionMoved)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) != 0 {
		t.Fatalf("proposed %v", rec.seen)
	}
}
