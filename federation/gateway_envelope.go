package federation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Forms of a map/federation/route request (map-protocol.md §8).
const (
	// FormSDK is params.envelope = {payload, federation:{sourceSystem,
	// targetSystem, hopCount, maxHops?, path?, originTimestamp,
	// correlationId?}}: what GatewayConnection.routeToSystem sends when
	// the gateway has a routing config.
	FormSDK = "sdk"
	// FormDocs07 is {message, federation:{sourceSystem, targetSystem,
	// hopCount, timestamp}} (docs/07), in params.envelope or params.message.
	FormDocs07 = "docs07"
	// FormRouting is {payload, routing:{from, to, hops[], maxHops},
	// timestamp}: the SDK server gateway's envelope.
	FormRouting = "routing"
	// FormMessage is a bare Message in params.message (the schema form;
	// routeToSystem without a routing config) or params.payload (the SDK
	// server's route handler): it names no source system.
	FormMessage = "message"
)

// maxGatewayHops bounds maxHops in an envelope from a gateway.
const maxGatewayHops = 255

// GatewayRoute is a map/federation/route request decoded from any of its
// forms into one shape. Hops are counted the Concord way: Arrival is the
// number of systems the envelope crossed before this one, its source
// included (the SDK's hopCount + 1).
type GatewayRoute struct {
	Form string
	// SystemID is params.systemId: the system the gateway asked this one
	// to route to.
	SystemID string
	// Source is "" for FormMessage (the caller decides it).
	Source, Target string
	// Path starts with Source (filled in when the envelope tracked none).
	Path    []string
	Arrival uint32
	// MaxHops is the envelope's bound (DefaultMaxHops when it set none;
	// 0 refuses every hop, as in the SDK).
	MaxHops       uint32
	OriginTsMs    int64
	CorrelationID string
	// MessageID is message.id ("" when the message had none).
	MessageID string
	// From is the sender's id in Source (the "<source>:agent:" prefix
	// removed).
	From string
	// Exactly one of ToAgent and ToScope names the recipient in Target.
	ToAgent, ToScope string
	Payload, Meta    json.RawMessage
}

// DecodeGatewayRoute decodes map/federation/route params. Every refusal
// is a -32602 *CodeError naming what is wrong; maxBytes bounds the
// message's payload plus meta (0: no bound).
func DecodeGatewayRoute(params json.RawMessage, maxBytes int) (*GatewayRoute, *CodeError) {
	p, err := object(params, "params")
	if err != nil {
		return nil, err
	}
	r := &GatewayRoute{MaxHops: DefaultMaxHops}
	if r.SystemID, err = systemField(p, "systemId", true); err != nil {
		return nil, err
	}
	var msg map[string]json.RawMessage
	switch {
	case present(p, "envelope"):
		env, err := object(p["envelope"], "envelope")
		if err != nil {
			return nil, err
		}
		if msg, err = r.decodeEnvelope(env, "envelope"); err != nil {
			return nil, err
		}
	case present(p, "message"):
		m, err := object(p["message"], "message")
		if err != nil {
			return nil, err
		}
		if present(m, "federation") { // a docs/07 envelope under message
			if msg, err = r.decodeEnvelope(m, "message"); err != nil {
				return nil, err
			}
		} else {
			msg, r.Form, r.Target = m, FormMessage, r.SystemID
		}
	case present(p, "payload"):
		m, err := object(p["payload"], "payload")
		if err != nil {
			return nil, err
		}
		msg, r.Form, r.Target = m, FormMessage, r.SystemID
		if err = hopsField(p, "maxHops", &r.MaxHops); err != nil {
			return nil, err
		}
	default:
		return nil, invalid("params need an envelope (or a message)", nil)
	}
	if err := r.decodeMessage(msg, maxBytes); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeEnvelope reads the three envelope forms and returns the message
// they carry.
func (r *GatewayRoute) decodeEnvelope(env map[string]json.RawMessage, where string) (map[string]json.RawMessage, *CodeError) {
	var msgKey string
	switch {
	case present(env, "federation"):
		f, err := object(env["federation"], where+".federation")
		if err != nil {
			return nil, err
		}
		r.Form, msgKey = FormSDK, "payload"
		if !present(env, "payload") && present(env, "message") {
			r.Form, msgKey = FormDocs07, "message"
		}
		if err := r.decodeFederation(f, where+".federation"); err != nil {
			return nil, err
		}
	case present(env, "routing"):
		rt, err := object(env["routing"], where+".routing")
		if err != nil {
			return nil, err
		}
		r.Form, msgKey = FormRouting, "payload"
		if err := r.decodeRouting(rt, where+".routing"); err != nil {
			return nil, err
		}
		if r.OriginTsMs, err = intField(env, "timestamp", where); err != nil {
			return nil, err
		}
	default:
		return nil, invalid(where+" needs federation (or routing) metadata", nil)
	}
	if !present(env, msgKey) {
		return nil, invalid(where+"."+msgKey+" is required", nil)
	}
	return object(env[msgKey], where+"."+msgKey)
}

// decodeFederation reads the SDK / docs/07 metadata.
func (r *GatewayRoute) decodeFederation(f map[string]json.RawMessage, where string) *CodeError {
	var err *CodeError
	if r.Source, err = systemField(f, "sourceSystem", true); err != nil {
		return prefixed(err, where)
	}
	if r.Target, err = systemField(f, "targetSystem", true); err != nil {
		return prefixed(err, where)
	}
	if !present(f, "hopCount") {
		return invalid(where+".hopCount is required", nil)
	}
	hops, err := intField(f, "hopCount", where)
	if err != nil {
		return err
	}
	if hops < 0 || hops >= maxGatewayHops {
		return invalid(fmt.Sprintf("%s.hopCount must be in 0..%d", where, maxGatewayHops-1), nil)
	}
	if err = hopsField(f, "maxHops", &r.MaxHops); err != nil {
		return prefixed(err, where)
	}
	if r.Path, err = systemList(f, "path", where); err != nil {
		return err
	}
	r.OriginTsMs, err = intField(f, "originTimestamp", where)
	if err == nil && r.OriginTsMs == 0 {
		r.OriginTsMs, err = intField(f, "timestamp", where) // docs/07
	}
	if err != nil {
		return err
	}
	if r.CorrelationID, err = stringField(f, "correlationId", where); err != nil {
		return err
	}
	r.Path = withSource(r.Path, r.Source)
	r.Arrival = uint32(hops) + 1
	if int(r.Arrival) < len(r.Path) {
		return invalid(fmt.Sprintf("%s.hopCount %d is smaller than the path it crossed (%d systems)", where, hops, len(r.Path)), nil)
	}
	return nil
}

// decodeRouting reads the SDK server gateway's {from, to, hops, maxHops}.
func (r *GatewayRoute) decodeRouting(rt map[string]json.RawMessage, where string) *CodeError {
	var err *CodeError
	if r.Source, err = systemField(rt, "from", true); err != nil {
		return prefixed(err, where)
	}
	if r.Target, err = systemField(rt, "to", true); err != nil {
		return prefixed(err, where)
	}
	if err = hopsField(rt, "maxHops", &r.MaxHops); err != nil {
		return prefixed(err, where)
	}
	if r.Path, err = systemList(rt, "hops", where); err != nil {
		return err
	}
	r.Path = withSource(r.Path, r.Source)
	r.Arrival = uint32(len(r.Path))
	return nil
}

// decodeMessage reads the MAP Message an envelope carries.
func (r *GatewayRoute) decodeMessage(m map[string]json.RawMessage, maxBytes int) *CodeError {
	var err *CodeError
	if r.MessageID, err = stringField(m, "id", "message"); err != nil {
		return err
	}
	from, err := stringField(m, "from", "message")
	if err != nil {
		return err
	}
	if r.From, err = r.sender(from); err != nil {
		return err
	}
	if !present(m, "to") {
		return invalid("message.to is required", nil)
	}
	if err := r.recipient(m["to"]); err != nil {
		return err
	}
	if present(m, "meta") {
		if _, err := object(m["meta"], "message.meta"); err != nil {
			return err
		}
		r.Meta = m["meta"]
	}
	if present(m, "payload") {
		r.Payload = m["payload"]
	}
	if maxBytes > 0 && len(r.Payload)+len(r.Meta) > maxBytes {
		return invalid(fmt.Sprintf("message payload and meta are %d bytes, more than the limit of %d", len(r.Payload)+len(r.Meta), maxBytes),
			map[string]any{"limit": maxBytes})
	}
	return nil
}

// sender strips the "<source>:agent:" prefix; a sender id naming another
// system is refused (it would pass for that system's agent).
func (r *GatewayRoute) sender(from string) (string, *CodeError) {
	if from == "" {
		return "", invalid("message.from is required", nil)
	}
	if sys, id, ok := splitRemote(from, "agent"); ok {
		if r.Source != "" && sys != r.Source {
			return "", invalid("message.from names system "+sys+", not the envelope's source "+r.Source, nil)
		}
		from = id
	}
	if !validEntityID(from) {
		return "", invalid("message.from must be 1..256 characters without ':' or control characters", nil)
	}
	return from, nil
}

// recipient reads message.to: an agent or scope of the target system, as
// "id", "<sys>:agent:<id>", "<sys>:scope:<id>", {agent, system?} or
// {scope, system?}.
func (r *GatewayRoute) recipient(raw json.RawMessage) *CodeError {
	var sys, agent, scope string
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch {
		case strings.Contains(s, ":scope:"):
			sys, scope, _ = splitRemote(s, "scope")
		case strings.Contains(s, ":agent:"):
			sys, agent, _ = splitRemote(s, "agent")
		default:
			agent = s
		}
	} else {
		to, err := object(raw, "message.to")
		if err != nil {
			return invalid("message.to must be an agent or scope address", nil)
		}
		if sys, err = stringField(to, "system", "message.to"); err != nil {
			return err
		}
		if agent, err = stringField(to, "agent", "message.to"); err != nil {
			return err
		}
		if scope, err = stringField(to, "scope", "message.to"); err != nil {
			return err
		}
		if len(to) != countPresent(to, "system", "agent", "scope") {
			return invalid("message.to across systems must be an agent or scope address ({agent} or {scope}, with system optional)", nil)
		}
	}
	switch {
	case (agent == "") == (scope == ""):
		return invalid("message.to must name exactly one agent or scope", nil)
	case sys != "" && r.Target != "" && sys != r.Target:
		return invalid("message.to names system "+sys+" but the envelope targets "+r.Target, nil)
	case !validEntityID(agent + scope):
		return invalid("message.to: ids are 1..256 characters without ':' or control characters", nil)
	}
	r.ToAgent, r.ToScope = agent, scope
	return nil
}

// splitRemote splits "<sys>:<kind>:<id>".
func splitRemote(s, kind string) (sys, id string, ok bool) {
	sys, rest, found := strings.Cut(s, ":"+kind+":")
	if !found || !validSystemID(sys) {
		return "", "", false
	}
	return sys, rest, true
}

func withSource(path []string, source string) []string {
	if len(path) == 0 || path[0] != source {
		return append([]string{source}, path...)
	}
	return path
}

// validEntityID accepts what may follow "<sys>:agent:" in a remote id.
func validEntityID(s string) bool {
	if s == "" || len(s) > 256 || strings.Contains(s, ":") {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

func invalid(msg string, data map[string]any) *CodeError {
	return codeErr(CodeInvalidParams, msg, data)
}

func prefixed(e *CodeError, where string) *CodeError {
	e.Message = where + "." + e.Message
	return e
}

func present(m map[string]json.RawMessage, k string) bool {
	v, ok := m[k]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func countPresent(m map[string]json.RawMessage, keys ...string) int {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	return n
}

func object(raw json.RawMessage, what string) (map[string]json.RawMessage, *CodeError) {
	var m map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &m) != nil {
		return nil, invalid(what+" must be an object", nil)
	}
	return m, nil
}

func stringField(m map[string]json.RawMessage, k, where string) (string, *CodeError) {
	if !present(m, k) {
		return "", nil
	}
	var s string
	if json.Unmarshal(m[k], &s) != nil {
		return "", invalid(where+"."+k+" must be a string", nil)
	}
	return s, nil
}

func systemField(m map[string]json.RawMessage, k string, required bool) (string, *CodeError) {
	s, err := stringField(m, k, "")
	switch {
	case err != nil:
		return "", invalid(k+" must be a string", nil)
	case s == "" && required:
		return "", invalid(k+" is required", nil)
	case s != "" && !validSystemID(s):
		return "", invalid(k+" is not a valid system id (1..64 of A-Z a-z 0-9 . _ -)", nil)
	}
	return s, nil
}

func systemList(m map[string]json.RawMessage, k, where string) ([]string, *CodeError) {
	if !present(m, k) {
		return nil, nil
	}
	var out []string
	if json.Unmarshal(m[k], &out) != nil {
		return nil, invalid(where+"."+k+" must be an array of system ids", nil)
	}
	if len(out) > maxGatewayHops {
		return nil, invalid(fmt.Sprintf("%s.%s crosses more than %d systems", where, k, maxGatewayHops), nil)
	}
	for _, s := range out {
		if !validSystemID(s) {
			return nil, invalid(where+"."+k+" holds an invalid system id", nil)
		}
	}
	return out, nil
}

func intField(m map[string]json.RawMessage, k, where string) (int64, *CodeError) {
	if !present(m, k) {
		return 0, nil
	}
	var f float64
	if json.Unmarshal(m[k], &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, invalid(where+"."+k+" must be an integer", nil)
	}
	return int64(f), nil
}

// hopsField reads a maxHops bound. 0 is a bound too (the SDK rejects
// every hop under it); absent leaves *dst alone.
func hopsField(m map[string]json.RawMessage, k string, dst *uint32) *CodeError {
	if !present(m, k) {
		return nil
	}
	v, err := intField(m, k, "")
	if err != nil || v < 0 || v > maxGatewayHops {
		return invalid(fmt.Sprintf("%s must be an integer in 0..%d", k, maxGatewayHops), nil)
	}
	*dst = uint32(v)
	return nil
}
