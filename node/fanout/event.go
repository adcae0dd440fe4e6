package fanout

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/registry"
)

// agentLookup is the registry read the filters need.
type agentLookup interface {
	Agent(id string) (registry.Agent, bool)
}

// prepared is one event ready for fan-out: its `event` object is encoded
// once and shared by every subscription; what filters need from its agents
// and data is computed on first use. Lazy fields are filled under Hub.mu
// (or on a private copy, for map/replay).
type prepared struct {
	ev        registry.Event
	typeKey   string
	ephemeral bool   // a message event: not in the log, delivered live only
	body      []byte // the Event object: {id, type, timestamp, source?, data?, causedBy?}
	stripped  []byte // body without data.payload (nil until needed)
	info      *evInfo
}

func prepare(ev registry.Event, ephemeral bool) *prepared {
	b := make([]byte, 0, 128+len(ev.ID)+len(ev.Type)+len(ev.Source)+len(ev.Data)+30*len(ev.CausedBy))
	return &prepared{ev: ev, typeKey: typeKey(ev.Type), ephemeral: ephemeral, body: encodeEvent(b, &ev, ev.Data)}
}

func encodeEvent(b []byte, ev *registry.Event, data []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonkit.AppendString(b, ev.ID)
	b = append(b, `,"type":`...)
	b = jsonkit.AppendString(b, ev.Type)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, ev.Timestamp, 10)
	if ev.Source != "" {
		b = append(b, `,"source":`...)
		b = jsonkit.AppendString(b, ev.Source)
	}
	if len(data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, data...)
	}
	if len(ev.CausedBy) > 0 {
		b = append(b, `,"causedBy":`...)
		b = jsonkit.AppendStrings(b, ev.CausedBy)
	}
	return append(b, '}')
}

// bodyFor returns the event object for a subscription: message events keep
// data.payload only with includeMessagePayloads (map-protocol.md §5.5).
func (p *prepared) bodyFor(includePayloads bool) []byte {
	if includePayloads || !strings.HasPrefix(p.ev.Type, "message_") {
		return p.body
	}
	if p.stripped == nil {
		p.stripped = p.body
		if d, ok := jsonkit.WithoutMember(p.ev.Data, "payload"); ok && len(d) < len(p.ev.Data) {
			p.stripped = encodeEvent(nil, &p.ev, d)
		} else if !ok {
			var data map[string]json.RawMessage // not walkable: let encoding/json decide
			if json.Unmarshal(p.ev.Data, &data) == nil {
				if _, has := data["payload"]; has {
					delete(data, "payload")
					if d, err := json.Marshal(data); err == nil {
						p.stripped = encodeEvent(nil, &p.ev, d)
					}
				}
			}
		}
	}
	return p.stripped
}

// evInfo is what the role, scope, priority, correlation and metadata
// filters read: the event's subject agents and a few data fields.
type evInfo struct {
	agents        []*agentView
	priority      string // "normal" when the event carries none
	correlationID string
}

// agentView is an agent as the filters see it, with metadata and
// environment decoded on first use.
type agentView struct {
	registry.Agent
	meta, env         map[string]any
	metaDone, envDone bool
}

func (a *agentView) metadata() map[string]any {
	if !a.metaDone {
		a.metaDone = true
		_ = json.Unmarshal(a.Metadata, &a.meta) // malformed or absent: nil, matches nothing
	}
	return a.meta
}

func (a *agentView) environment() map[string]any {
	if !a.envDone {
		a.envDone = true
		_ = json.Unmarshal(a.Environment, &a.env)
	}
	return a.env
}

// infoFrom resolves the event's agents from the registry; an agent that is
// gone (agent_unregistered) is read from data.agent when the event has one.
func (p *prepared) infoFrom(look agentLookup) *evInfo {
	if p.info != nil {
		return p.info
	}
	in := &evInfo{priority: "normal"}
	for _, id := range p.ev.AgentIDs {
		if a, ok := look.Agent(id); ok {
			in.agents = append(in.agents, &agentView{Agent: a})
		}
	}
	var data struct {
		Priority      string          `json:"priority"`
		CorrelationID string          `json:"correlationId"`
		Agent         *registry.Agent `json:"agent"`
	}
	if len(p.ev.Data) > 0 && json.Unmarshal(p.ev.Data, &data) == nil {
		if data.Priority != "" {
			in.priority = data.Priority
		}
		in.correlationID = data.CorrelationID
		if len(in.agents) == 0 && data.Agent != nil {
			in.agents = append(in.agents, &agentView{Agent: *data.Agent})
		}
	}
	p.info = in
	return in
}
