package mapsvc

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// registerParams is the decoded map/agents/register (and spawn) params.
type registerParams struct {
	rec          *concordv1.AgentRecord
	persistentID string
	resumePI     bool
	// spawn only
	initialMessage  json.RawMessage
	requestedScopes []string
}

var visibilities = []string{"public", "parent-only", "scope", "system"}

func decodeRegister(raw json.RawMessage, spawn bool) (registerParams, *rpc.Error) {
	p := decodeParams(raw)
	rec := &concordv1.AgentRecord{
		Id:                   p.str("agentId"),
		Name:                 p.str("name"),
		Description:          p.str("description"),
		Role:                 p.str("role"),
		Parent:               p.str("parent"),
		Scopes:               p.strs("scopes"),
		Visibility:           p.enum("visibility", visibilities...),
		Capabilities:         p.object("capabilities"),
		CapabilityDescriptor: p.object("capabilityDescriptor"),
		Environment:          p.object("environment"),
		Metadata:             p.object("metadata"),
		PermissionOverrides:  p.object("permissionOverrides"),
		Relationships:        p.array("relationships"),
		Meta:                 p.object("_meta"),
	}
	checkPermissionOverrides(p, rec.PermissionOverrides)
	rp := registerParams{rec: rec}
	if p.has("persistentIdentity") {
		pi := p.sub("persistentIdentity")
		rp.persistentID = pi.reqStr("persistentId")
		p.merge(pi)
		rec.PersistentIdentity = p.object("persistentIdentity")
	}
	rp.resumePI, _ = p.boolean("resumePersistentIdentity")
	if spawn {
		rp.initialMessage = p.object("initialMessage")
		rp.requestedScopes = p.strs("requestedScopes")
		if n, ok := p.integer("ttlMinutes"); ok && n < 1 {
			p.fail("ttlMinutes", "must be >= 1")
		}
	}
	return rp, p.err()
}

// agentsRegister serves map/agents/register. The agent is owned by the
// caller's session (ownerId = participantId) and homed on this node.
func (s *Service) agentsRegister(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	rp, perr := decodeRegister(raw, false)
	if perr != nil {
		return nil, perr
	}
	rr, err := s.register(ctx, cs, &rp)
	if err != nil {
		return nil, err
	}
	return registerResult(rr), nil
}

func (s *Service) register(ctx context.Context, cs *connState, rp *registerParams) (registry.RegisterResult, error) {
	rec := rp.rec
	if rec.Id == "" {
		rec.Id = s.newID()
	}
	if err := s.inheritPermissions(ctx, cs, rec); err != nil {
		return registry.RegisterResult{}, err
	}
	rec.OwnerId, rec.SessionId, rec.HomeNode = cs.participantID, cs.sessionID, s.cfg.NodeID
	req := &concordv1.AgentRegisterRequest{
		Meta: s.meta(cs.participantID, 1+len(rec.Scopes)), Agent: rec,
		ResumePersistentIdentity: rp.resumePI, PersistentId: rp.persistentID,
	}
	if s.fsmLevel(ctx) >= registry.FSMLevelResumeEpoch {
		// Should this request fail before it commits and its session then
		// move (resumed elsewhere), a late commit must not re-home the
		// agent here.
		req.SessionEpoch = cs.epoch
	}
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER, req)
	if err != nil {
		return registry.RegisterResult{}, err
	}
	return res.(registry.RegisterResult), nil
}

func registerResult(rr registry.RegisterResult) map[string]any {
	out := map[string]any{"agent": rr.Agent}
	if rr.Resumed {
		out["resumed"] = true
		out["resumedFrom"] = map[string]any{"previousSessionId": rr.PreviousSessionID}
	}
	return out
}

// agentsSpawn serves map/agents/spawn: register, then send initialMessage
// (if any) to the new agent through the router, from the parent.
// requestedScopes are joined like scopes; ttlMinutes is accepted but not
// enforced. The two steps are not atomic: when the message cannot be sent
// the agent stays registered and the result carries initialMessageError.
func (s *Service) agentsSpawn(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	rp, perr := decodeRegister(raw, true)
	if perr != nil {
		return nil, perr
	}
	if rp.initialMessage != nil && s.cfg.Router == nil {
		return nil, rpc.NewError(rpc.CodeSpawnFailed, "initialMessage needs a router; none is configured")
	}
	rp.rec.Scopes = append(rp.rec.Scopes, rp.requestedScopes...)
	rr, err := s.register(ctx, cs, &rp)
	if err != nil {
		return nil, err
	}
	out := registerResult(rr)
	if rp.initialMessage == nil {
		return out, nil
	}
	// The router resolves the child in this replica, which may not have
	// applied the register yet when the leader's result answered it.
	err = s.awaitFence(ctx, fenceAll)
	var msgID string
	if err == nil {
		msgID, err = s.sendInitial(ctx, cs, rr.Agent, rp.initialMessage)
	}
	if err != nil {
		out["initialMessageError"] = asRPCError(err)
		return out, nil
	}
	out["messageId"] = msgID
	return out, nil
}

// sendInitial sends a spawn's initialMessage ({payload?, meta?, ...}) to
// the spawned agent and returns the message id.
func (s *Service) sendInitial(ctx context.Context, cs *connState, child registry.Agent, msg json.RawMessage) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(msg, &m); err != nil {
		return "", rpc.InvalidParams("initialMessage", "must be an object")
	}
	send := map[string]any{"to": map[string]string{"agent": child.ID}}
	for _, k := range []string{"payload", "meta", "_meta"} {
		if v, ok := m[k]; ok {
			send[k] = v
		}
	}
	raw, err := json.Marshal(send)
	if err != nil {
		return "", err
	}
	from := s.sender(cs)
	if child.Parent != "" {
		from.AgentID = child.Parent
	}
	res, err := s.cfg.Router.Send(ctx, from, raw)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return "", err
	}
	var r struct {
		MessageID string `json:"messageId"`
	}
	_ = json.Unmarshal(b, &r)
	return r.MessageID, nil
}

// agentsUnregister serves map/agents/unregister.
func (s *Service) agentsUnregister(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	id := p.reqStr("agentId")
	reason := p.str("reason")
	if err := p.err(); err != nil {
		return nil, err
	}
	if err := s.mayControl(cs, id); err != nil {
		return nil, err
	}
	req := &concordv1.AgentUnregisterRequest{Meta: s.meta(cs.participantID, 1), AgentId: id, Reason: reason}
	req.OriginSessionId, req.OriginSessionEpoch = s.origin(ctx, cs)
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER, req)
	if err != nil {
		return nil, err
	}
	return &agentResult{flag: "unregistered", agent: res.(registry.Agent)}, nil
}

// agentsUpdate serves map/agents/update: state (any valid state; the SDK
// moves freely between registered/busy/idle/stopped, only leaving stopped
// is refused), metadata, environment, permissionOverrides and the
// descriptive fields.
func (s *Service) agentsUpdate(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	up, perr := decodeUpdate(raw)
	if perr != nil {
		return nil, perr
	}
	if err := s.mayControl(cs, up.AgentId); err != nil {
		return nil, err
	}
	if up.PermissionOverrides != nil {
		if err := s.mayChangePermissions(cs, up.AgentId); err != nil {
			return nil, err
		}
	}
	// One id per event the update can produce (a state change, changed
	// permissions, a changed environment); a state-only update, the usual
	// write, carries one id rather than three, which every replica would
	// decode and discard. The registry derives any further id itself.
	events := 1
	if up.PermissionOverrides != nil {
		events++
	}
	if up.Environment != nil {
		events++
	}
	up.Meta = s.meta(cs.participantID, events)
	up.OriginSessionId, up.OriginSessionEpoch = s.origin(ctx, cs)
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE, up)
	if err != nil {
		return nil, err
	}
	return &agentResult{agent: res.(registry.Agent)}, nil
}

func decodeUpdate(raw json.RawMessage) (*concordv1.AgentUpdateRequest, *rpc.Error) {
	p := decodeParams(raw)
	up := &concordv1.AgentUpdateRequest{AgentId: p.reqStr("agentId")}
	// proto.String, not &v: a variable whose address is taken is moved
	// to the heap even when the field is absent.
	if st, ok := p.optStr("state"); ok {
		if !registry.ValidState(st) {
			p.fail("state", "must be a MAP agent state or x-<custom>")
		}
		up.State = proto.String(st)
	}
	setStr := func(field string, dst **string) {
		if v, ok := p.optStr(field); ok {
			*dst = proto.String(v)
		}
	}
	setStr("name", &up.Name)
	setStr("description", &up.Description)
	setStr("role", &up.Role)
	if v := p.enum("visibility", visibilities...); v != "" {
		up.Visibility = proto.String(v)
	}
	up.Metadata = p.object("metadata")
	up.Environment = p.object("environment")
	up.PermissionOverrides = p.object("permissionOverrides")
	checkPermissionOverrides(p, up.PermissionOverrides)
	up.Capabilities = p.object("capabilities")
	up.CapabilityDescriptor = p.object("capabilityDescriptor")
	up.Reason = p.str("reason")
	return up, p.err()
}

// lifecycleVerb serves map/agents/stop|suspend|resume. Results follow the
// SDK conformance pack: {stopping|suspended|resumed: true, agent}.
func (s *Service) lifecycleVerb(verb string) func(context.Context, *rpc.Conn, *connState, json.RawMessage) (any, error) {
	key := map[string]string{
		registry.TransitionStop:    "stopping",
		registry.TransitionSuspend: "suspended",
		registry.TransitionResume:  "resumed",
	}[verb]
	return func(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
		p := decodeParams(raw)
		id := p.reqStr("agentId")
		reason := p.str("reason")
		p.boolean("force") // accepted; stop is immediate either way
		if err := p.err(); err != nil {
			return nil, err
		}
		if err := s.mayControl(cs, id); err != nil {
			return nil, err
		}
		up := &concordv1.AgentUpdateRequest{Meta: s.meta(cs.participantID, 1), AgentId: id, Transition: verb, Reason: reason}
		up.OriginSessionId, up.OriginSessionEpoch = s.origin(ctx, cs)
		res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_AGENT_UPDATE, up)
		if err != nil {
			return nil, err
		}
		return &agentResult{flag: key, agent: res.(registry.Agent)}, nil
	}
}

// mayControl checks that the caller may change an agent: a system
// participant, the agent's owner, or the owner of one of its ancestors
// (a parent manages what it spawned). Unknown agents pass here and fail
// with 2001 in the registry. Otherwise 1003.
func (s *Service) mayControl(cs *connState, agentID string) error {
	if cs.participantType == TypeSystem {
		return nil
	}
	a, ok := s.reg.Agent(agentID)
	for depth := 0; ok && depth < 64; depth++ {
		if a.OwnerID == cs.participantID {
			return nil
		}
		if a.Parent == "" {
			break
		}
		a, ok = s.reg.Agent(a.Parent)
	}
	if _, exists := s.reg.Agent(agentID); !exists {
		return nil
	}
	return permissionDenied("agent " + agentID + " belongs to another participant")
}

// sender builds the router's view of the caller: the agent it speaks for
// is the one its session owns when there is exactly one, or the one whose
// id is the participant id.
func (s *Service) sender(cs *connState) Sender {
	return Sender{SessionID: cs.sessionID, ParticipantID: cs.participantID, ParticipantType: cs.participantType,
		AgentID: s.reg.SpeakerAgent(cs.sessionID, cs.participantID), SessionEpoch: cs.epoch}
}

// send serves map/send through the router, which also resolves service
// ids (router.RegisterService) such as "concord.runs". It is mounted only
// when Config.Router is set.
func (s *Service) send(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	return s.cfg.Router.HandleSend(ctx, s.sender(cs), raw)
}
