package registry

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Hand decoders of the command bodies every replica decodes most often.
// proto.Unmarshal walks a table of field coders through reflection and
// allocates the message, its CommandMeta, the ids slice and every string
// apart; at the benchmark's load (map/agents/update) it was a third of an
// apply. A hand decoder reads the same bytes into the same message and
// nothing else: it handles a strict subset of what proto.Unmarshal
// accepts (every known field with its declared wire type, each singular
// field at most once, valid UTF-8 strings) and gives any other body to
// proto.Unmarshal, so what is accepted, refused and produced never
// changes (TestDecode_MatchesUnmarshal, FuzzDecodeCommands).

// bodyDecoders are the hand decoders by command type (the rest are
// decoded by proto.Unmarshal).
var bodyDecoders = map[concordv1.CommandType]func([]byte) (proto.Message, error){
	concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE: func(b []byte) (proto.Message, error) {
		return decodeOrUnmarshal(b, decodeAgentUpdate, newMsg[concordv1.AgentUpdateRequest])
	},
	concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER: func(b []byte) (proto.Message, error) {
		return decodeOrUnmarshal(b, decodeRegister, newMsg[concordv1.AgentRegisterRequest])
	},
	concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN: func(b []byte) (proto.Message, error) {
		return decodeOrUnmarshal(b, decodeOpen, newMsg[concordv1.SessionOpenRequest])
	},
	concordv1.CommandType_COMMAND_TYPE_SESSION_DETACH: func(b []byte) (proto.Message, error) {
		return decodeOrUnmarshal(b, decodeDetach, newMsg[concordv1.SessionDetachRequest])
	},
	concordv1.CommandType_COMMAND_TYPE_SESSION_EXPIRE: func(b []byte) (proto.Message, error) {
		return decodeOrUnmarshal(b, decodeExpire, newMsg[concordv1.SessionExpireRequest])
	},
	concordv1.CommandType_COMMAND_TYPE_SUBSCRIPTION_CURSOR: func(b []byte) (proto.Message, error) {
		return decodeOrUnmarshal(b, decodeCursor, newMsg[concordv1.SubscriptionCursorRequest])
	},
}

func newMsg[T any]() *T { return new(T) }

// decodeOrUnmarshal returns what decode made of body, or, when decode
// declined it, proto.Unmarshal's result in a message from newMsg.
func decodeOrUnmarshal[M proto.Message](body []byte, decode func([]byte) (M, bool), newMsg func() M) (proto.Message, error) {
	if m, ok := decode(body); ok {
		return m, nil
	}
	m := newMsg()
	if err := proto.Unmarshal(body, m); err != nil {
		return nil, err
	}
	return m, nil
}

// agentUpdateBody is an AGENT_UPDATE message with its CommandMeta, event
// id and state in one allocation (the handler reads and drops them; the
// strings it keeps are allocated apart).
type agentUpdateBody struct {
	req   concordv1.AgentUpdateRequest
	meta  concordv1.CommandMeta
	ids   [1]string
	state string
}

// Field numbers of AgentUpdateRequest (registry.proto).
const (
	fUpdMeta protowire.Number = iota + 1
	fUpdAgentID
	fUpdTransition
	fUpdState
	fUpdReason
	fUpdMetadata
	fUpdEnvironment
	fUpdPermissionOverrides
	fUpdCapabilities
	fUpdCapabilityDescriptor
	fUpdName
	fUpdDescription
	fUpdRole
	fUpdVisibility
	fUpdSetOwner
	fUpdOwnerID
	fUpdSessionID
	fUpdHomeNode
	fUpdOriginSessionID
	fUpdOriginSessionEpoch
)

// decodeAgentUpdate decodes an AgentUpdateRequest; false: not one it
// handles (see above), proto.Unmarshal decides.
func decodeAgentUpdate(b []byte) (*concordv1.AgentUpdateRequest, bool) {
	body := &agentUpdateBody{}
	if !decodeAgentUpdateInto(body, b) {
		return nil, false
	}
	return &body.req, true
}

// decodeAgentUpdateInto is decodeAgentUpdate into a zeroed body.
func decodeAgentUpdateInto(body *agentUpdateBody, b []byte) bool {
	m := &body.req
	var seen uint32 // bit n: field n seen
	// The agent and origin session ids are read only while the update
	// applies: both are cut from one copy, made at the end.
	var agentID, originID []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > fUpdOriginSessionEpoch || seen&(1<<num) != 0 {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		if num == fUpdSetOwner || num == fUpdOriginSessionEpoch {
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			if num == fUpdSetOwner {
				m.SetOwner = v != 0
			} else {
				m.OriginSessionEpoch = v
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return false // includes field numbers not in the message
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var ok bool
		switch num {
		case fUpdMeta:
			m.Meta, ok = &body.meta, decodeMeta(v, &body.meta, body.ids[:0:1])
		case fUpdAgentID:
			agentID, ok = v, utf8.Valid(v)
		case fUpdTransition:
			m.Transition, ok = str(v)
		case fUpdState:
			body.state, ok = stateStr(v)
			m.State = &body.state
		case fUpdReason:
			m.Reason, ok = str(v)
		case fUpdMetadata:
			m.Metadata, ok = present(v), true
		case fUpdEnvironment:
			m.Environment, ok = present(v), true
		case fUpdPermissionOverrides:
			m.PermissionOverrides, ok = present(v), true
		case fUpdCapabilities:
			m.Capabilities, ok = present(v), true
		case fUpdCapabilityDescriptor:
			m.CapabilityDescriptor, ok = present(v), true
		case fUpdName:
			m.Name, ok = strPtr(v)
		case fUpdDescription:
			m.Description, ok = strPtr(v)
		case fUpdRole:
			m.Role, ok = strPtr(v)
		case fUpdVisibility:
			m.Visibility, ok = strPtr(v)
		case fUpdOwnerID:
			m.OwnerId, ok = str(v)
		case fUpdSessionID:
			m.SessionId, ok = str(v)
		case fUpdHomeNode:
			m.HomeNode, ok = str(v)
		case fUpdOriginSessionID:
			originID, ok = v, utf8.Valid(v)
		}
		if !ok {
			return false
		}
	}
	if len(agentID)+len(originID) > 0 {
		var sb strings.Builder // one allocation, whatever the lengths
		sb.Grow(len(agentID) + len(originID))
		sb.Write(agentID)
		sb.Write(originID)
		ids := sb.String()
		m.AgentId, m.OriginSessionId = ids[:len(agentID)], ids[len(agentID):]
	}
	return true
}

// Field numbers of CommandMeta.
const (
	fMetaTimestamp protowire.Number = iota + 1
	fMetaEventIDs
	fMetaNodeID
	fMetaSource
)

// decodeMeta decodes a CommandMeta into m; ids is where its event ids go
// (appended: the first ones land in the caller's array). Its strings are
// cut from one copy of b: an event keeps its id and source together for
// as long as it stays in the window, and b is little more than they are.
func decodeMeta(b []byte, m *concordv1.CommandMeta, ids []string) bool {
	all := string(b)
	var seen uint8
	for pos := 0; pos < len(b); {
		num, typ, n := protowire.ConsumeTag(b[pos:])
		if n < 0 || num > fMetaSource || (num != fMetaEventIDs && seen&(1<<num) != 0) {
			return false
		}
		seen |= 1 << num
		pos += n
		if num == fMetaTimestamp {
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b[pos:])
			if n < 0 {
				return false
			}
			m.TimestampMs = int64(v)
			pos += n
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b[pos:])
		if n < 0 || !utf8.Valid(v) {
			return false
		}
		start := pos + n - len(v)
		s := all[start : start+len(v)]
		pos += n
		switch num {
		case fMetaEventIDs:
			ids = append(ids, s)
		case fMetaNodeID:
			m.NodeId = s
		case fMetaSource:
			m.Source = s
		}
	}
	if len(ids) > 0 {
		m.EventIds = ids
	}
	return true
}

// str copies a string field; false when it is not valid UTF-8 (which
// proto.Unmarshal refuses for a proto3 string).
func str(v []byte) (string, bool) {
	if !utf8.Valid(v) {
		return "", false
	}
	return string(v), true
}

func strPtr(v []byte) (*string, bool) {
	s, ok := str(v)
	return &s, ok
}

// stateStr is str for an agent state: the usual states are the
// constants, not a copy each.
func stateStr(v []byte) (string, bool) {
	switch string(v) {
	case StateBusy:
		return StateBusy, true
	case StateIdle:
		return StateIdle, true
	case StateActive:
		return StateActive, true
	}
	return str(v)
}

// present copies a bytes field with presence: set, even when empty, as
// proto.Unmarshal leaves it.
func present(v []byte) []byte {
	return append([]byte{}, v...)
}
