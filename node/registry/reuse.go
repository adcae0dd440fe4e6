package registry

import (
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// updateBodies lends AGENT_UPDATE bodies to the State's decoder and takes
// back the one Apply has finished with, so that applying a stream of
// updates reuses one body (about 450 bytes, 40% of what an update
// allocated on every replica) instead of leaving one to the GC per entry.
//
// It relies on two rules. raftstore's FSM does not touch a message after
// the handler's Apply returns (Handler's doc). And nothing the registry
// keeps after an update points into its body: every string it stores is
// allocated apart from the body (decodeMeta's copy, str), the state is a
// constant or such a string, and the result points to the stored entry
// (TestUpdateBodyReuse_NothingKeptPointsIntoBody poisons a released body
// and checks the state and the result).
//
// Decode may be called from any goroutine, so the two slots are atomic: a
// body is in spare only once its Apply has returned, and whoever swaps it
// out owns it. lent is the body handed out last; only that one is taken
// back, so a message from proto.Unmarshal (a body the hand decoder
// declined) or one decoded elsewhere meanwhile is simply left to the GC.
type updateBodies struct {
	spare atomic.Pointer[agentUpdateBody]
	lent  atomic.Pointer[agentUpdateBody]
}

// decode is the AGENT_UPDATE hand decoder (decodeAgentUpdate) into a
// reused body.
func (u *updateBodies) decode(b []byte) (proto.Message, error) {
	body := u.spare.Swap(nil)
	if body == nil {
		body = new(agentUpdateBody)
	} else {
		*body = agentUpdateBody{}
	}
	if !decodeAgentUpdateInto(body, b) {
		u.spare.Store(body) // handed to nobody
		m := new(concordv1.AgentUpdateRequest)
		if err := proto.Unmarshal(b, m); err != nil {
			return nil, err
		}
		return m, nil
	}
	u.lent.Store(body)
	return &body.req, nil
}

// release takes back msg's body once Apply has returned, if decode lent it.
func (u *updateBodies) release(msg proto.Message) {
	body := u.lent.Load()
	if m, ok := msg.(*concordv1.AgentUpdateRequest); !ok || body == nil || m != &body.req {
		return
	}
	if u.lent.CompareAndSwap(body, nil) {
		u.spare.Store(body)
	}
}
