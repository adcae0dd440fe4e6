package registry

import (
	"encoding/json"
	"strconv"
)

// Event payloads. Every replica writes the Data of every event, so the
// common payloads are appended by hand rather than by json.Marshal of a
// map (reflection, boxed values, a key sort, a buffer copy). Each writes
// byte for byte what json.Marshal wrote for the map[string]any it
// replaced: keys in sorted order, HTML-escaped strings, invalid UTF-8
// replaced. Replicas running this binary and the previous one therefore
// keep identical events (TestEventPayloads_MatchMapForm).

// stateChangeData is the agent_state_changed payload; reason is omitted
// when empty.
func stateChangeData(agentID, prev, cur, reason string) json.RawMessage {
	size := len(`{"agentId":"","current":"","previous":"","reason":""}`) + len(agentID) + len(prev) + len(cur) + len(reason)
	return appendStateChange(make([]byte, 0, size), agentID, prev, cur, reason)
}

// appendStateChange appends stateChangeData's bytes to b.
func appendStateChange(b []byte, agentID, prev, cur, reason string) []byte {
	o := object{b: append(b, '{')}
	o.str("agentId", agentID)
	o.str("current", cur)
	o.str("previous", prev)
	if reason != "" {
		o.str("reason", reason)
	}
	return o.done()
}

// registeredData is the agent_registered payload, {"agent": a}.
// json.Marshal of that map calls Agent.MarshalJSON and re-compacts its
// output, which is already compact and HTML-escaped (it is json.Marshal's
// own), so the bytes are the same without the map, the boxing and the
// second pass.
func registeredData(a *Agent) json.RawMessage {
	agent, err := a.MarshalJSON()
	if err != nil {
		panic("registry: marshal agent_registered event: " + err.Error()) // never: agents always marshal
	}
	b := make([]byte, 0, len(`{"agent":}`)+len(agent))
	b = append(b, `{"agent":`...)
	b = append(b, agent...)
	return append(b, '}')
}

// memberData is the scope_member_joined and scope_member_left payload.
func memberData(scopeID, agentID string) json.RawMessage {
	o := newObject(len(`{"agentId":"","scopeId":""}`) + len(agentID) + len(scopeID))
	o.str("agentId", agentID)
	o.str("scopeId", scopeID)
	return o.done()
}

// connectedData is the participant_connected payload; name is omitted
// when empty.
func connectedData(s *Session, reconnected bool) json.RawMessage {
	o := newObject(len(`{"name":"","participantId":"","participantType":"","reconnected":false,"sessionId":""}`) +
		len(s.Name) + len(s.ParticipantID) + len(s.ParticipantType) + len(s.ID))
	if s.Name != "" {
		o.str("name", s.Name)
	}
	o.str("participantId", s.ParticipantID)
	o.str("participantType", s.ParticipantType)
	o.bool("reconnected", reconnected)
	o.str("sessionId", s.ID)
	return o.done()
}

// disconnectedData is the participant_disconnected payload.
func disconnectedData(participantID, sessionID, reason string) json.RawMessage {
	o := newObject(len(`{"participantId":"","reason":"","sessionId":""}`) + len(participantID) + len(reason) + len(sessionID))
	o.str("participantId", participantID)
	o.str("reason", reason)
	o.str("sessionId", sessionID)
	return o.done()
}

// unregisteredData is the agent_unregistered payload.
func unregisteredData(agentID, reason string) json.RawMessage {
	o := newObject(len(`{"agentId":"","reason":""}`) + len(agentID) + len(reason))
	o.str("agentId", agentID)
	o.str("reason", reason)
	return o.done()
}

// orphanedData is the agent_orphaned payload.
func orphanedData(agentID, prevOwner, prevState, sessionID string, orphanedAt int64) json.RawMessage {
	o := newObject(len(`{"agentId":"","orphanedAt":-9223372036854775808,"previousOwnerId":"","previousState":"","sessionId":""}`) +
		len(agentID) + len(prevOwner) + len(prevState) + len(sessionID))
	o.str("agentId", agentID)
	o.int("orphanedAt", orphanedAt)
	o.str("previousOwnerId", prevOwner)
	o.str("previousState", prevState)
	o.str("sessionId", sessionID)
	return o.done()
}

// object appends a JSON object. Callers add members in sorted key order
// (json.Marshal's order for a map); keys are plain ASCII identifiers.
type object struct{ b []byte }

// newObject starts an object in a buffer of size bytes: the exact length
// when no string needs escaping.
func newObject(size int) object {
	return object{b: append(make([]byte, 0, size), '{')}
}

func (o *object) key(k string) {
	if o.b[len(o.b)-1] != '{' {
		o.b = append(o.b, ',')
	}
	o.b = append(o.b, '"')
	o.b = append(o.b, k...)
	o.b = append(o.b, '"', ':')
}

func (o *object) str(k, v string) {
	o.key(k)
	o.b = appendMarshaledString(o.b, v)
}

func (o *object) int(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *object) bool(k string, v bool) {
	o.key(k)
	o.b = strconv.AppendBool(o.b, v)
}

func (o *object) done() json.RawMessage { return append(o.b, '}') }

// appendMarshaledString appends s as json.Marshal writes it. Printable
// ASCII other than '"', '\\' and the HTML-escaped '<', '>', '&' is copied
// (ids, states, node names); any other string is json.Marshal's own
// output, so the bytes are its by construction.
func appendMarshaledString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil {
				panic("registry: marshal a string: " + err.Error()) // never: a string always marshals
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
