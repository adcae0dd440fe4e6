package registry

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// The registry's raftstore.ResultCodec: a follower that forwarded one of
// these commands answers with the leader's result (results.go lists the
// Go types) instead of waiting for its own apply. Subscription commands
// are left out: their proposer (node/fanout) waits for the local apply
// anyway, and SUBSCRIPTION_CURSOR's result is a bare count nobody reads.

var _ raftstore.ResultCodec = (*State)(nil)

// errNoResult: a RegistryResult lacks the record its command type needs.
var errNoResult = errors.New("registry: forwarded result lacks its record")

// resultKind is how one command type's result is carried in RegistryResult.
type resultKind int

const (
	kindRegister resultKind = iota + 1
	kindAgent
	kindSession
	kindDetach
	kindScope
	kindMembership
)

var resultKinds = map[concordv1.CommandType]resultKind{
	concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER:   kindRegister,
	concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER: kindAgent,
	concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE:     kindAgent,
	concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN:     kindSession,
	concordv1.CommandType_COMMAND_TYPE_SESSION_CLOSE:    kindDetach,
	concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH:   kindDetach,
	concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE:   kindDetach,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_CREATE:     kindScope,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_DELETE:     kindScope,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_JOIN:       kindMembership,
	concordv1.CommandType_COMMAND_TYPE_SCOPE_LEAVE:      kindMembership,
}

// EncodeResult implements raftstore.ResultCodec. It declines types not in
// resultKinds, errors other than *Error (their text could not be rebuilt
// exactly), and values of an unexpected Go type.
func (s *State) EncodeResult(t concordv1.CommandType, r raftstore.Result) ([]byte, bool) {
	kind, ok := resultKinds[t]
	if !ok {
		return nil, false
	}
	out := &concordv1.RegistryResult{}
	if r.Err != nil {
		e, ok := r.Err.(*Error)
		if !ok {
			return nil, false
		}
		out.Error = &concordv1.RegistryError{Code: int32(e.Code), Message: e.Message, Field: e.Field}
	} else if !encodeValue(kind, r.Value, out) {
		return nil, false
	}
	b, err := proto.Marshal(out)
	return b, err == nil
}

// encodeValue fills out from v, the result of a command of the given kind;
// false when v is not of the kind's Go type.
func encodeValue(kind resultKind, v any, out *concordv1.RegistryResult) bool {
	switch kind {
	case kindRegister:
		rr, ok := v.(RegisterResult)
		if !ok {
			return false
		}
		out.Agent, out.Resumed, out.PreviousSessionId, out.Existing = AgentRecord(&rr.Agent), rr.Resumed, rr.PreviousSessionID, rr.Existing
	case kindAgent:
		a, ok := v.(Agent)
		if !ok {
			return false
		}
		out.Agent = AgentRecord(&a)
	case kindSession:
		sr, ok := v.(SessionResult)
		if !ok {
			return false
		}
		out.Session, out.Epoch, out.Resumed = sessionRecord(&sessionEntry{s: sr.Session}), sr.Epoch, sr.Resumed
		for i := range sr.Reclaimed {
			out.Reclaimed = append(out.Reclaimed, AgentRecord(&sr.Reclaimed[i]))
		}
		out.NotReclaimed, out.OwnedAgents = sr.NotReclaimed, sr.OwnedAgents
	case kindDetach:
		dr, ok := v.(DetachResult)
		if !ok {
			return false
		}
		out.Applied, out.Session = dr.Applied, sessionRecord(&sessionEntry{s: dr.Session})
		out.Unregistered, out.Orphaned, out.Removed = dr.Unregistered, dr.Orphaned, dr.Removed
	case kindScope:
		sc, ok := v.(Scope)
		if !ok {
			return false
		}
		out.Scope = ScopeRecord(&sc)
	case kindMembership:
		mr, ok := v.(MembershipResult)
		if !ok {
			return false
		}
		out.Scope, out.Agent, out.Changed, out.ScopeDeleted = ScopeRecord(&mr.Scope), AgentRecord(&mr.Agent), mr.Changed, mr.ScopeDeleted
	}
	return true
}

// DecodeResult implements raftstore.ResultCodec. data comes from the
// leader's process: anything it cannot rebuild exactly is an error.
func (s *State) DecodeResult(t concordv1.CommandType, data []byte) (raftstore.Result, error) {
	kind, ok := resultKinds[t]
	if !ok {
		return raftstore.Result{}, fmt.Errorf("registry: no result codec for %s", t)
	}
	var in concordv1.RegistryResult
	if err := proto.Unmarshal(data, &in); err != nil {
		return raftstore.Result{}, fmt.Errorf("registry: decode %s result: %w", t, err)
	}
	if e := in.GetError(); e != nil {
		if e.GetCode() == 0 {
			return raftstore.Result{}, fmt.Errorf("registry: %s result: error without a code", t)
		}
		return raftstore.Result{Err: &Error{Code: int(e.GetCode()), Message: e.GetMessage(), Field: e.GetField()}}, nil
	}
	v, err := decodeValue(kind, &in)
	if err != nil {
		return raftstore.Result{}, fmt.Errorf("registry: %s result: %w", t, err)
	}
	return raftstore.Result{Value: v}, nil
}

// decodeValue rebuilds the Go result of a command of the given kind.
func decodeValue(kind resultKind, in *concordv1.RegistryResult) (any, error) {
	switch kind {
	case kindRegister:
		if in.Agent == nil {
			return nil, errNoResult
		}
		return RegisterResult{Agent: agentFromRecord(in.Agent), Resumed: in.GetResumed(),
			PreviousSessionID: in.GetPreviousSessionId(), Existing: in.GetExisting()}, nil
	case kindAgent:
		if in.Agent == nil {
			return nil, errNoResult
		}
		return agentFromRecord(in.Agent), nil
	case kindSession:
		if in.Session == nil {
			return nil, errNoResult
		}
		sr := SessionResult{Session: sessionFromRecord(in.Session), Epoch: in.GetEpoch(), Resumed: in.GetResumed(),
			NotReclaimed: cloneStrings(in.GetNotReclaimed()), OwnedAgents: cloneStrings(in.GetOwnedAgents())}
		for _, a := range in.GetReclaimed() {
			sr.Reclaimed = append(sr.Reclaimed, agentFromRecord(a))
		}
		return sr, nil
	case kindDetach:
		if in.Session == nil {
			return nil, errNoResult
		}
		return DetachResult{Applied: in.GetApplied(), Session: sessionFromRecord(in.Session),
			Unregistered: cloneStrings(in.GetUnregistered()), Orphaned: cloneStrings(in.GetOrphaned()), Removed: in.GetRemoved()}, nil
	case kindScope:
		if in.Scope == nil {
			return nil, errNoResult
		}
		return scopeFromRecord(in.Scope), nil
	case kindMembership:
		if in.Scope == nil || in.Agent == nil {
			return nil, errNoResult
		}
		return MembershipResult{Scope: scopeFromRecord(in.Scope), Agent: agentFromRecord(in.Agent),
			Changed: in.GetChanged(), ScopeDeleted: in.GetScopeDeleted()}, nil
	}
	return nil, fmt.Errorf("unknown result kind %d", kind)
}

// cloneStrings keeps nil as nil (as the handlers leave empty lists).
func cloneStrings(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	return append([]string(nil), in...)
}
