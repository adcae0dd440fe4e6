package federation

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// DefaultMaxHops is the hop bound of envelopes a system originates when
// its link does not set one (the SDK gateway's default).
const DefaultMaxHops = 5

// CheckInbound validates an envelope that arrived from system from at
// system self. It returns a *CodeError: -32602 for a malformed envelope
// or one whose source is not the linked system that sent it, 5010 when
// self already appears in the path, 5011 when the hop budget is spent.
func CheckInbound(env *concordv1.FedEnvelope, self, from string, maxBytes int) *CodeError {
	switch {
	case env == nil:
		return codeErr(CodeInvalidParams, "empty envelope", nil)
	case maxBytes > 0 && len(env.GetPayload())+len(env.GetMeta()) > maxBytes:
		return codeErr(CodeInvalidParams, fmt.Sprintf("envelope larger than %d bytes", maxBytes), nil)
	case env.GetMessageId() == "" || env.GetFrom() == "":
		return codeErr(CodeInvalidParams, "envelope needs a message id and a sender", nil)
	case (env.GetToAgent() == "") == (env.GetToScope() == ""):
		return codeErr(CodeInvalidParams, "envelope needs exactly one of to_agent and to_scope", nil)
	case len(env.GetPath()) == 0 || env.GetPath()[len(env.GetPath())-1] != from:
		return codeErr(CodeInvalidParams, "envelope path must end with the system that sent it", map[string]any{"from": from, "path": env.GetPath()})
	case env.GetPath()[0] != env.GetSourceSystem():
		return codeErr(CodeInvalidParams, "envelope path must start with its source system", nil)
	case env.GetTargetSystem() == "":
		return codeErr(CodeInvalidParams, "envelope has no target system", nil)
	case slices.Contains(env.GetPath(), self):
		return codeErr(CodeLoopDetected, "Loop detected: "+self+" is already in the envelope's path",
			map[string]any{"path": env.GetPath(), "systemId": self})
	case env.GetHopCount() != uint32(len(env.GetPath())):
		return codeErr(CodeInvalidParams, "envelope hop count does not match its path", nil)
	case env.GetMaxHops() == 0 || env.GetHopCount() > env.GetMaxHops():
		return codeErr(CodeMaxHopsExceeded, fmt.Sprintf("Max hops exceeded: %d of %d", env.GetHopCount(), env.GetMaxHops()),
			map[string]any{"hopCount": env.GetHopCount(), "maxHops": env.GetMaxHops(), "path": env.GetPath()})
	}
	if len(env.GetMeta()) > 0 && !json.Valid(env.GetMeta()) || len(env.GetPayload()) > 0 && !json.Valid(env.GetPayload()) {
		return codeErr(CodeInvalidParams, "envelope payload and meta must be JSON", nil)
	}
	return nil
}

// CheckForward validates sending env from self to the next system: 5010
// when next is already in the path, 5011 when one more hop exceeds the
// envelope's bound.
func CheckForward(env *concordv1.FedEnvelope, next string) *CodeError {
	if slices.Contains(env.GetPath(), next) {
		return codeErr(CodeLoopDetected, "Loop detected: "+next+" is already in the envelope's path",
			map[string]any{"path": env.GetPath(), "systemId": next})
	}
	if env.GetHopCount()+1 > env.GetMaxHops() {
		return codeErr(CodeMaxHopsExceeded, fmt.Sprintf("Max hops exceeded: %d of %d", env.GetHopCount()+1, env.GetMaxHops()),
			map[string]any{"hopCount": env.GetHopCount() + 1, "maxHops": env.GetMaxHops(), "path": env.GetPath()})
	}
	return nil
}

// Stamp records that env leaves system self: self joins the path and the
// hop count grows by one. Call it after CheckForward.
func Stamp(env *concordv1.FedEnvelope, self string) {
	env.Path = append(env.Path, self)
	env.HopCount = uint32(len(env.Path))
}

// RemoteID renders a remote entity id, "<system>:agent:<id>".
func RemoteID(system, agentID string) string { return system + ":agent:" + agentID }

// ParseRemoteID splits a remote agent id "<system>:agent:<id>" (RemoteID's
// form) at its first ":agent:"; ok is false for any other string, and for
// a system id that is not valid.
func ParseRemoteID(s string) (system, agentID string, ok bool) {
	system, agentID, ok = strings.Cut(s, ":agent:")
	if !ok || agentID == "" || !validSystemID(system) {
		return "", "", false
	}
	return system, agentID, true
}

// BuildServiceParams renders the map/send params a receiving system hands
// to the in-process service env is addressed to (ServiceDeliverer): to
// the service, the envelope's payload and meta.
func BuildServiceParams(env *concordv1.FedEnvelope) json.RawMessage {
	b := make([]byte, 0, 48+len(env.GetToAgent())+len(env.GetPayload())+len(env.GetMeta()))
	b = append(b, `{"to":{"agent":`...)
	b = appendJSONString(b, env.GetToAgent())
	b = append(b, '}')
	b = appendBody(b, env)
	return append(b, '}')
}

// appendBody appends the envelope's payload and meta as object members.
func appendBody(b []byte, env *concordv1.FedEnvelope) []byte {
	if len(env.GetPayload()) > 0 {
		b = append(b, `,"payload":`...)
		b = append(b, env.GetPayload()...)
	}
	if len(env.GetMeta()) > 0 {
		b = append(b, `,"meta":`...)
		b = append(b, env.GetMeta()...)
	}
	return b
}

// BuildMessage renders the MAP Message a receiving system delivers: from
// is the remote form of the sender, so a remote participant never passes
// for a local one; to names the local recipient.
func BuildMessage(env *concordv1.FedEnvelope) json.RawMessage { return buildMessage(env, false) }

// buildMessage renders the Message; with toSystem, `to` also names the
// target system (what a gateway relaying it into that system needs).
func buildMessage(env *concordv1.FedEnvelope, toSystem bool) json.RawMessage {
	// Sized for the whole message: growing it doubled the bytes
	// allocated per delivered message in profiles.
	size := 192 + len(env.GetPayload()) + len(env.GetMeta()) + len(env.GetMessageId()) + 2*len(env.GetSourceSystem()) +
		len(env.GetFrom()) + len(env.GetToAgent()) + len(env.GetToScope()) + 2*len(env.GetTargetSystem())
	for _, p := range env.GetPath() {
		size += len(p) + 3
	}
	b := make([]byte, 0, size)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, env.GetMessageId())
	b = append(b, `,"from":`...)
	if src, from := env.GetSourceSystem(), env.GetFrom(); plainJSON(src) && plainJSON(from) {
		b = append(b, '"') // RemoteID without building the string
		b = append(b, src...)
		b = append(b, ":agent:"...)
		b = append(b, from...)
		b = append(b, '"')
	} else {
		b = appendJSONString(b, RemoteID(src, from))
	}
	b = append(b, `,"to":{`...)
	if toSystem {
		b = append(b, `"system":`...)
		b = appendJSONString(b, env.GetTargetSystem())
		b = append(b, ',')
	}
	if env.GetToAgent() != "" {
		b = append(b, `"agent":`...)
		b = appendJSONString(b, env.GetToAgent())
	} else {
		b = append(b, `"scope":`...)
		b = appendJSONString(b, env.GetToScope())
	}
	b = append(b, '}')
	b = appendBody(b, env)
	b = append(b, `,"federation":{"sourceSystem":`...)
	b = appendJSONString(b, env.GetSourceSystem())
	b = append(b, `,"targetSystem":`...)
	b = appendJSONString(b, env.GetTargetSystem())
	b = append(b, `,"hopCount":`...)
	b = strconv.AppendUint(b, uint64(env.GetHopCount()), 10)
	b = append(b, `,"maxHops":`...)
	b = strconv.AppendUint(b, uint64(env.GetMaxHops()), 10)
	b = append(b, `,"originTimestamp":`...)
	b = strconv.AppendInt(b, env.GetOriginTsMs(), 10)
	b = append(b, `,"path":[`...)
	for i, p := range env.GetPath() {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, p)
	}
	return append(b, "]}}"...)
}

// appendJSONString appends s as a JSON string. Ids and system names are
// plain ASCII: they are copied as they are (BuildMessage runs once per
// delivered message, where json.Marshal's reflection and escaping showed
// in profiles); anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	if !plainJSON(s) {
		q, _ := json.Marshal(s) // a string: cannot fail
		return append(b, q...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plainJSON reports whether s is printable ASCII that encoding/json
// would write unchanged between quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
