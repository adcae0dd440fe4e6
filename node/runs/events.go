package runs

import (
	"crypto/sha256"
	"encoding/json"
	"strconv"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/registry"
)

// recordEvents turns the engine events of one Step into run events (kept
// in the run) and MAP events (for the registry window). Each payload is
// encoded once, straight into the MAP event's data; the run event's
// payload is a window of those bytes.
func (r *run) recordEvents(evs []*consensus.Event) []registry.Event {
	if len(evs) == 0 {
		return nil
	}
	out := make([]registry.Event, 0, len(evs))
	for _, ev := range evs {
		re := runEvent{seq: ev.Seq, atMs: ev.AtMs, at: ev.At, typ: ev.Type, id: eventID(r.id, ev.Seq, ev.AtMs)}
		data, payload := r.mapEventData(&re, ev.Payload)
		re.payload = payload
		r.events = append(r.events, re)
		r.observe(&r.events[len(r.events)-1])
		out = append(out, registry.Event{
			ID:        re.id,
			Type:      EventTypePrefix + ev.Type,
			Timestamp: ev.AtMs,
			Source:    ServiceID,
			Data:      data,
			AgentIDs:  subjects(ev.Payload),
		})
	}
	return out
}

// jsonAppender is implemented by engine payloads with a hand-written
// encoder (byte-identical to encoding/json's, tested in consensus).
type jsonAppender interface{ AppendJSON([]byte) []byte }

// eventID derives a run event's MAP id from (run id, seq): a ULID whose
// time is the event's and whose entropy is a hash of the pair, so it is
// the same on every replica and sorts by time. The registry re-derives
// the id in the unlikely case of a collision in its window.
func eventID(runID string, seq, atMs int64) string {
	var u ulid.ULID
	ms := uint64(max(atMs, 0))
	_ = u.SetTime(min(ms, ulid.MaxTime()))
	h := sha256.Sum256([]byte(runID + "/" + strconv.FormatInt(seq, 10)))
	_ = u.SetEntropy(h[:10])
	return u.String()
}

// mapEventData encodes the MAP event's data {runId, requestId, seq, at,
// payload} and returns it with the payload's bytes within it.
func (r *run) mapEventData(ev *runEvent, p any) (data, payload json.RawMessage) {
	b := make([]byte, 0, 128+len(r.id)+len(r.requestID)+payloadSizeHint(p))
	b = append(b, `{"runId":`...)
	b = jsonkit.AppendString(b, r.id)
	b = append(b, `,"requestId":`...)
	b = jsonkit.AppendString(b, r.requestID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.seq, 10)
	b = append(b, `,"at":`...)
	b = jsonkit.AppendString(b, ev.at)
	b = append(b, `,"payload":`...)
	start := len(b)
	if a, ok := p.(jsonAppender); ok {
		b = a.AppendJSON(b)
	} else if enc, err := json.Marshal(p); err == nil {
		b = append(b, enc...)
	} else {
		// Engine payloads are plain structs and always encode; keep
		// replicas identical rather than panicking if one ever fails.
		b = append(b, "null"...)
	}
	end := len(b)
	b = append(b, '}')
	return b, b[start:end:end]
}

// payloadSizeHint estimates a payload's JSON size, so the buffer of a
// large ParticipantResponded is allocated once.
func payloadSizeHint(p any) int {
	r, ok := p.(*consensus.ParticipantRespondedPayload)
	if !ok {
		return 128
	}
	n := 256 + len(r.FullResponse) + len(r.Summary) + 96*len(r.JudgementsDetail)
	for _, c := range r.ExtractedClaimsDetail {
		n += 48 + len(c.Title) + len(c.Statement)
	}
	return n + 40*len(r.ClaimVotesDetail)
}

// engineEvent is the engine's own event envelope (argue's shape:
// {sessionId, requestId, type, at, payload}), as get returns it.
func (r *run) engineEvent(ev *runEvent) json.RawMessage {
	b := make([]byte, 0, 96+len(r.id)+len(r.requestID)+len(ev.typ)+len(ev.payload))
	b = append(b, `{"sessionId":`...)
	b = jsonkit.AppendString(b, r.id)
	b = append(b, `,"requestId":`...)
	b = jsonkit.AppendString(b, r.requestID)
	b = append(b, `,"type":`...)
	b = jsonkit.AppendString(b, ev.typ)
	b = append(b, `,"at":`...)
	b = jsonkit.AppendString(b, ev.at)
	if len(ev.payload) > 0 && string(ev.payload) != "null" {
		b = append(b, `,"payload":`...)
		b = append(b, ev.payload...)
	}
	return append(b, '}')
}

// subjects are the agents an event is about, for `agents` subscription
// filters.
func subjects(payload any) []string {
	var id string
	switch p := payload.(type) {
	case *consensus.ParticipantRespondedPayload:
		id = p.ParticipantID
	case *consensus.ParticipantEliminatedPayload:
		id = p.ParticipantID
	case *consensus.ReportDispatchedPayload:
		id = p.ReporterID
	case *consensus.ReportCompletedPayload:
		id = p.ReporterID
	case *consensus.ActionDispatchedPayload:
		id = p.ActorID
	case *consensus.ActionCompletedPayload:
		id = p.ActorID
	case *consensus.ActionFailedPayload:
		id = p.ActorID
	}
	if id == "" {
		return nil
	}
	return []string{id}
}
