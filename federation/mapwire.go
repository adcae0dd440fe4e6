package federation

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// What a map link sends and reads on a foreign MAP server. The shapes are
// the MAP schema's with the SDK's variants accepted (map-protocol.md §0.1,
// cluster-test/sdk/SDK-WIRE.md).

// mapAuth is map/connect's auth in both spellings (schema token, SDK
// credential).
type mapAuth struct {
	Method     string `json:"method"`
	Token      string `json:"token"`
	Credential string `json:"credential"`
}

func connectParams(link *concordv1.FedMapLink, ptype, name, sessionID, resumeToken string) map[string]any {
	p := map[string]any{"protocolVersion": 1, "participantType": ptype, "name": name}
	if a := link.GetAuth(); a.GetMethod() != "" {
		p["auth"] = mapAuth{Method: a.GetMethod(), Token: a.GetToken(), Credential: a.GetToken()}
	}
	if sessionID != "" {
		p["sessionId"] = sessionID
	}
	if resumeToken != "" {
		p["resumeToken"] = resumeToken
	}
	if ptype == "agent" {
		// The next holder may be another node, which cannot resume this
		// session: a server that honours the policy frees the proxy's id
		// as soon as the connection is lost, for the next registration.
		p["disconnectPolicy"] = map[string]any{"agentBehavior": "unregister"}
	}
	return p
}

// connectResult is what a map link reads from map/connect.
type connectResult struct {
	SessionID    string          `json:"sessionId"`
	ResumeToken  string          `json:"resumeToken"`
	Reconnected  bool            `json:"reconnected"`
	OwnedAgents  []string        `json:"ownedAgents"`
	AuthRequired json.RawMessage `json:"authRequired"`
}

func parseConnect(raw json.RawMessage) (connectResult, error) {
	var r connectResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%w: map/connect result: %w", errForeign, err)
	}
	if len(r.AuthRequired) > 0 && string(r.AuthRequired) != "null" && r.SessionID == "" {
		return r, codeErr(CodeAuthFailed, "the foreign MAP server refused the link's credentials (authRequired)", nil)
	}
	return r, nil
}

// errForeign marks an answer from the foreign server this link cannot
// read.
var errForeign = errors.New("federation: malformed answer from the foreign MAP server")

// foreignAgent is one entry of map/agents/list (and the agent of
// map/agents/register's result).
type foreignAgent struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Role        string          `json:"role"`
	State       string          `json:"state"`
	Description string          `json:"description"`
	Metadata    json.RawMessage `json:"metadata"`
}

// proxyMeta is the metadata a proxy registers with: it lets every holder
// of this system recognise its proxies (and remove a previous holder's).
type proxyMeta struct {
	ConcordSystem string `json:"concordSystem"`
	ConcordAgent  string `json:"concordAgent"`
	ConcordProxy  bool   `json:"concordProxy"`
	ConcordHolder string `json:"concordHolder"`
	Tags          []string
}

func (a *foreignAgent) meta() proxyMeta {
	var m struct {
		proxyMeta
		Tags []string `json:"tags"`
	}
	if len(a.Metadata) > 0 && json.Unmarshal(a.Metadata, &m) == nil {
		m.proxyMeta.Tags = m.Tags
	}
	return m.proxyMeta
}

func (a *foreignAgent) remote() *concordv1.FedRemoteAgent {
	return &concordv1.FedRemoteAgent{Id: a.ID, Name: a.Name, Role: a.Role, State: a.State, Description: a.Description, Tags: a.meta().Tags}
}

// listResult is one page of map/agents/list. Agents stay raw so that an
// entry of the wrong shape is dropped alone (decodeAgent) instead of
// making the whole page unreadable.
type listResult struct {
	Agents     []json.RawMessage `json:"agents"`
	NextCursor string            `json:"nextCursor"`
}

// decodeAgent reads one entry of a listing; false when it is not an agent
// object with a string id.
func decodeAgent(raw json.RawMessage) (foreignAgent, bool) {
	var a foreignAgent
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &a) != nil {
		return foreignAgent{}, false
	}
	return a, true
}

type registerResult struct {
	Agent foreignAgent `json:"agent"`
}

// foreignMessage is a map/message from the foreign server: params are
// {message} or the Message itself (the SDK accepts both).
type foreignMessage struct {
	ID        string          `json:"id"`
	From      json.RawMessage `json:"from"`
	Payload   json.RawMessage `json:"payload"`
	Meta      json.RawMessage `json:"meta"`
	Timestamp int64           `json:"timestamp"`
}

func parseForeignMessage(params json.RawMessage) (*foreignMessage, error) {
	var wrap struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(params, &wrap); err != nil {
		return nil, fmt.Errorf("map/message params are not an object: %w", err)
	}
	body := params
	if len(wrap.Message) > 0 && string(wrap.Message) != "null" {
		body = wrap.Message
	}
	var m foreignMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("map/message is not a Message: %w", err)
	}
	return &m, nil
}

// sender is the foreign sender's id: a non-empty string usable in
// "<system>:agent:<id>".
func (m *foreignMessage) sender() (string, error) {
	var from string
	if err := json.Unmarshal(m.From, &from); err != nil || from == "" {
		return "", errors.New("map/message without a sender id")
	}
	if err := ValidForeignAgent(&concordv1.FedRemoteAgent{Id: from}); err != nil {
		return "", err
	}
	return from, nil
}

// pairing remembers a request a proxy sent that expects an answer: the
// foreign server's message id and the correlation id the local sender
// gave. Some servers (the SDK's reference MAPServer) drop meta on the way,
// so the answer may come back without a correlation id, or with the
// foreign message id as one (what AgentConnection.reply falls back to).
type pairing struct {
	seq                         uint64 // the proxy's number for it
	foreignMsgID, correlationID string // foreignMsgID is "" until map/send answered
	at                          time.Time
}

// pairing bounds: answers older than pairingTTL are not paired.
const (
	maxPairings = 256
	pairingTTL  = 10 * time.Minute
)

// requestCorrelation returns the correlation id of a message that expects
// a response ("" when it does not).
func requestCorrelation(meta []byte) string {
	var m struct {
		ExpectsResponse bool   `json:"expectsResponse"`
		CorrelationID   string `json:"correlationId"`
	}
	if len(meta) == 0 || json.Unmarshal(meta, &m) != nil || !m.ExpectsResponse {
		return ""
	}
	return m.CorrelationID
}

// pairAnswer restores the correlation id of an answer from target, given
// the requests still open to it (oldest first). It returns the meta to
// deliver and the open requests left.
func pairAnswer(meta json.RawMessage, open []pairing, now time.Time) (json.RawMessage, []pairing) {
	for len(open) > 0 && now.Sub(open[0].at) > pairingTTL {
		open = open[1:]
	}
	if len(open) == 0 {
		return meta, open
	}
	fields := map[string]json.RawMessage{}
	if len(meta) > 0 && string(meta) != "null" && json.Unmarshal(meta, &fields) != nil {
		return meta, open
	}
	var cid string
	if raw, ok := fields["correlationId"]; ok && json.Unmarshal(raw, &cid) == nil && cid != "" {
		for i, p := range open {
			if p.foreignMsgID != "" && p.foreignMsgID == cid {
				fields["correlationId"], _ = json.Marshal(p.correlationID)
				out, _ := json.Marshal(fields)
				return out, append(open[:i:i], open[i+1:]...)
			}
		}
		return meta, open // an answer to something else
	}
	fields["correlationId"], _ = json.Marshal(open[0].correlationID)
	if _, ok := fields["isResult"]; !ok {
		fields["isResult"] = json.RawMessage("true")
	}
	out, _ := json.Marshal(fields)
	return out, open[1:]
}
