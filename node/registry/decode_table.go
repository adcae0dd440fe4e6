package registry

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Table-driven hand decoders for the session and subscription commands:
// each message is a table of its fields, read with the same strict rules
// as decodeAgentUpdate (decode.go), and anything outside them goes to
// proto.Unmarshal.

// wireField reads one field of a message M.
type wireField[M any] struct {
	known    bool
	typ      protowire.Type // VarintType or BytesType
	repeated bool
	// set stores the field: v is its bytes (BytesType), x its varint.
	set func(m *M, v []byte, x uint64) bool
}

// wireMessage is the field table of M, indexed by field number.
type wireMessage[M any] []wireField[M]

// decode reads b into m; false when b is outside the subset (see
// decode.go) and proto.Unmarshal must decide.
func (w wireMessage[M]) decode(b []byte, m *M) bool {
	var seen uint64 // bit n: field n seen (tables stay under 64 fields)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || int(num) >= len(w) {
			return false
		}
		f := &w[num]
		if !f.known || typ != f.typ || (!f.repeated && seen&(1<<num) != 0) {
			return false
		}
		seen |= 1 << num
		b = b[n:]
		var v []byte
		var x uint64
		if typ == protowire.VarintType {
			x, n = protowire.ConsumeVarint(b)
		} else {
			v, n = protowire.ConsumeBytes(b)
		}
		if n < 0 || !f.set(m, v, x) {
			return false
		}
		b = b[n:]
	}
	return true
}

// table builds a wireMessage from fields by number.
func table[M any](fields map[protowire.Number]wireField[M]) wireMessage[M] {
	var top protowire.Number
	for num := range fields {
		top = max(top, num)
	}
	w := make(wireMessage[M], top+1)
	for num, f := range fields {
		f.known = true
		w[num] = f
	}
	return w
}

// Field readers. Each mirrors what proto.Unmarshal stores for a proto3
// field of that kind read once.

func strField[M any](p func(*M) *string) wireField[M] {
	return wireField[M]{typ: protowire.BytesType, set: func(m *M, v []byte, _ uint64) bool {
		if !utf8.Valid(v) {
			return false
		}
		*p(m) = string(v)
		return true
	}}
}

func strsField[M any](p func(*M) *[]string) wireField[M] {
	return wireField[M]{typ: protowire.BytesType, repeated: true, set: func(m *M, v []byte, _ uint64) bool {
		if !utf8.Valid(v) {
			return false
		}
		*p(m) = append(*p(m), string(v))
		return true
	}}
}

// bytesField is a proto3 bytes field without presence: empty is unset.
func bytesField[M any](p func(*M) *[]byte) wireField[M] {
	return wireField[M]{typ: protowire.BytesType, set: func(m *M, v []byte, _ uint64) bool {
		if len(v) > 0 {
			*p(m) = append([]byte(nil), v...)
		}
		return true
	}}
}

func int64Field[M any](p func(*M) *int64) wireField[M] {
	return wireField[M]{typ: protowire.VarintType, set: func(m *M, _ []byte, x uint64) bool {
		*p(m) = int64(x)
		return true
	}}
}

func uint64Field[M any](p func(*M) *uint64) wireField[M] {
	return wireField[M]{typ: protowire.VarintType, set: func(m *M, _ []byte, x uint64) bool {
		*p(m) = x
		return true
	}}
}

func boolField[M any](p func(*M) *bool) wireField[M] {
	return wireField[M]{typ: protowire.VarintType, set: func(m *M, _ []byte, x uint64) bool {
		*p(m) = x != 0
		return true
	}}
}

// msgField is a singular message field decoded with sub.
func msgField[M, S any](p func(*M) **S, sub *wireMessage[S]) wireField[M] {
	return wireField[M]{typ: protowire.BytesType, set: func(m *M, v []byte, _ uint64) bool {
		s := new(S)
		*p(m) = s
		return sub.decode(v, s)
	}}
}

// msgsField is a repeated message field decoded with sub.
func msgsField[M, S any](p func(*M) *[]*S, sub *wireMessage[S]) wireField[M] {
	return wireField[M]{typ: protowire.BytesType, repeated: true, set: func(m *M, v []byte, _ uint64) bool {
		s := new(S)
		*p(m) = append(*p(m), s)
		return sub.decode(v, s)
	}}
}

// metaField is a command's CommandMeta (decodeMeta).
func metaField[M any](p func(*M) **concordv1.CommandMeta) wireField[M] {
	return wireField[M]{typ: protowire.BytesType, set: func(m *M, v []byte, _ uint64) bool {
		meta := new(concordv1.CommandMeta)
		*p(m) = meta
		return decodeMeta(v, meta, nil)
	}}
}

// The tables, field numbers as in registry.proto.

type (
	detachReq   = concordv1.SessionDetachRequest
	expireReq   = concordv1.SessionExpireRequest
	openReq     = concordv1.SessionOpenRequest
	sessionRec  = concordv1.SessionRecord
	policyRec   = concordv1.DisconnectPolicyRecord
	subRec      = concordv1.SubscriptionRecord
	registerReq = concordv1.AgentRegisterRequest
	agentRec    = concordv1.AgentRecord
	lifeRec     = concordv1.LifecycleRecord
	cursorReq   = concordv1.SubscriptionCursorRequest
	cursorRec   = concordv1.SubscriptionCursor
)

var detachTable = table(map[protowire.Number]wireField[detachReq]{
	1: metaField(func(m *detachReq) **concordv1.CommandMeta { return &m.Meta }),
	2: strField(func(m *detachReq) *string { return &m.SessionId }),
	3: strField(func(m *detachReq) *string { return &m.Reason }),
	4: uint64Field(func(m *detachReq) *uint64 { return &m.Epoch }),
	5: int64Field(func(m *detachReq) *int64 { return &m.TtlMs }),
	6: strField(func(m *detachReq) *string { return &m.HomeNode }),
})

var expireTable = table(map[protowire.Number]wireField[expireReq]{
	1: metaField(func(m *expireReq) **concordv1.CommandMeta { return &m.Meta }),
	2: strField(func(m *expireReq) *string { return &m.SessionId }),
	3: uint64Field(func(m *expireReq) *uint64 { return &m.Epoch }),
	4: strField(func(m *expireReq) *string { return &m.Kind }),
})

var policyTable = table(map[protowire.Number]wireField[policyRec]{
	1: strField(func(m *policyRec) *string { return &m.AgentBehavior }),
	2: int64Field(func(m *policyRec) *int64 { return &m.GracePeriodMs }),
	3: boolField(func(m *policyRec) *bool { return &m.NotifySubscribers }),
})

var subTable = table(map[protowire.Number]wireField[subRec]{
	1: strField(func(m *subRec) *string { return &m.Id }),
	2: strField(func(m *subRec) *string { return &m.SessionId }),
	3: bytesField(func(m *subRec) *[]byte { return &m.Filter }),
	4: bytesField(func(m *subRec) *[]byte { return &m.Options }),
	5: int64Field(func(m *subRec) *int64 { return &m.CreatedAt }),
	6: strField(func(m *subRec) *string { return &m.CursorEventId }),
	7: uint64Field(func(m *subRec) *uint64 { return &m.CursorSeq }),
})

var sessionTable = table(map[protowire.Number]wireField[sessionRec]{
	1:  strField(func(m *sessionRec) *string { return &m.Id }),
	2:  strField(func(m *sessionRec) *string { return &m.ParticipantId }),
	3:  strField(func(m *sessionRec) *string { return &m.ParticipantType }),
	4:  strField(func(m *sessionRec) *string { return &m.Name }),
	5:  strField(func(m *sessionRec) *string { return &m.HomeNode }),
	6:  boolField(func(m *sessionRec) *bool { return &m.Connected }),
	7:  int64Field(func(m *sessionRec) *int64 { return &m.CreatedAt }),
	8:  int64Field(func(m *sessionRec) *int64 { return &m.LastActiveAt }),
	9:  int64Field(func(m *sessionRec) *int64 { return &m.ClosedAt }),
	10: msgField(func(m *sessionRec) **policyRec { return &m.DisconnectPolicy }, &policyTable),
	11: int64Field(func(m *sessionRec) *int64 { return &m.DetachedAt }),
	12: bytesField(func(m *sessionRec) *[]byte { return &m.ResumeTokenHash }),
	13: msgsField(func(m *sessionRec) *[]*subRec { return &m.Subscriptions }, &subTable),
	14: uint64Field(func(m *sessionRec) *uint64 { return &m.Epoch }),
	15: int64Field(func(m *sessionRec) *int64 { return &m.TtlMs }),
	16: boolField(func(m *sessionRec) *bool { return &m.GraceDone }),
})

var openTable = table(map[protowire.Number]wireField[openReq]{
	1: metaField(func(m *openReq) **concordv1.CommandMeta { return &m.Meta }),
	2: msgField(func(m *openReq) **sessionRec { return &m.Session }, &sessionTable),
	3: boolField(func(m *openReq) *bool { return &m.Resume }),
	4: strsField(func(m *openReq) *[]string { return &m.ReclaimAgents }),
	5: uint64Field(func(m *openReq) *uint64 { return &m.ResumeFromEpoch }),
	6: strsField(func(m *openReq) *[]string { return &m.ReclaimFromSessions }),
})

var lifeTable = table(map[protowire.Number]wireField[lifeRec]{
	1: int64Field(func(m *lifeRec) *int64 { return &m.CreatedAt }),
	2: int64Field(func(m *lifeRec) *int64 { return &m.StartedAt }),
	3: int64Field(func(m *lifeRec) *int64 { return &m.StoppedAt }),
	4: int64Field(func(m *lifeRec) *int64 { return &m.LastActiveAt }),
	5: int64Field(func(m *lifeRec) *int64 { return &m.OrphanedAt }),
	6: strField(func(m *lifeRec) *string { return &m.ExitReason }),
})

var agentTable = table(map[protowire.Number]wireField[agentRec]{
	1:  strField(func(m *agentRec) *string { return &m.Id }),
	2:  strField(func(m *agentRec) *string { return &m.Name }),
	3:  strField(func(m *agentRec) *string { return &m.Description }),
	4:  strField(func(m *agentRec) *string { return &m.Role }),
	5:  strField(func(m *agentRec) *string { return &m.Parent }),
	6:  strsField(func(m *agentRec) *[]string { return &m.Scopes }),
	7:  strField(func(m *agentRec) *string { return &m.State }),
	8:  strField(func(m *agentRec) *string { return &m.OwnerId }),
	9:  strField(func(m *agentRec) *string { return &m.Visibility }),
	10: strField(func(m *agentRec) *string { return &m.SessionId }),
	11: strField(func(m *agentRec) *string { return &m.HomeNode }),
	12: msgField(func(m *agentRec) **lifeRec { return &m.Lifecycle }, &lifeTable),
	13: bytesField(func(m *agentRec) *[]byte { return &m.Capabilities }),
	14: bytesField(func(m *agentRec) *[]byte { return &m.CapabilityDescriptor }),
	15: bytesField(func(m *agentRec) *[]byte { return &m.Environment }),
	16: bytesField(func(m *agentRec) *[]byte { return &m.Metadata }),
	17: bytesField(func(m *agentRec) *[]byte { return &m.PermissionOverrides }),
	18: bytesField(func(m *agentRec) *[]byte { return &m.PersistentIdentity }),
	19: bytesField(func(m *agentRec) *[]byte { return &m.Relationships }),
	20: bytesField(func(m *agentRec) *[]byte { return &m.Meta }),
	21: strField(func(m *agentRec) *string { return &m.StateBeforeOrphan }),
	22: strField(func(m *agentRec) *string { return &m.PersistentId }),
})

var registerTable = table(map[protowire.Number]wireField[registerReq]{
	1: metaField(func(m *registerReq) **concordv1.CommandMeta { return &m.Meta }),
	2: msgField(func(m *registerReq) **agentRec { return &m.Agent }, &agentTable),
	3: boolField(func(m *registerReq) *bool { return &m.ResumePersistentIdentity }),
	4: strField(func(m *registerReq) *string { return &m.PersistentId }),
	5: uint64Field(func(m *registerReq) *uint64 { return &m.SessionEpoch }),
})

var cursorTable = table(map[protowire.Number]wireField[cursorRec]{
	1: strField(func(m *cursorRec) *string { return &m.SessionId }),
	2: strField(func(m *cursorRec) *string { return &m.SubscriptionId }),
	3: strField(func(m *cursorRec) *string { return &m.EventId }),
	4: uint64Field(func(m *cursorRec) *uint64 { return &m.Seq }),
	5: uint64Field(func(m *cursorRec) *uint64 { return &m.SessionEpoch }),
})

var cursorReqTable = table(map[protowire.Number]wireField[cursorReq]{
	1: metaField(func(m *cursorReq) **concordv1.CommandMeta { return &m.Meta }),
	2: msgsField(func(m *cursorReq) *[]*cursorRec { return &m.Cursors }, &cursorTable),
})

// tableDecoder is a decode function over a table, for decodeOrUnmarshal.
func tableDecoder[M any](w *wireMessage[M]) func([]byte) (*M, bool) {
	return func(b []byte) (*M, bool) {
		m := new(M)
		if !w.decode(b, m) {
			return nil, false
		}
		return m, true
	}
}

// The decode functions, made once.
var (
	decodeRegister = tableDecoder(&registerTable)
	decodeOpen     = tableDecoder(&openTable)
	decodeDetach   = tableDecoder(&detachTable)
	decodeExpire   = tableDecoder(&expireTable)
	decodeCursor   = tableDecoder(&cursorReqTable)
)
