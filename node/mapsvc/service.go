package mapsvc

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Service is the MAP method table of one node: an rpc.Handler. It serves
// map/connect, map/disconnect, map/auth/refresh, map/agents/*,
// map/scopes/* and map/structure/graph itself and delegates map/send to
// the Router and the subscription methods to the Fanout. It owns the table
// of sessions attached to this node's connections (Sessions).
//
// Handle and Closed are called by node/rpc, one connection at a time per
// connection; everything else is safe for concurrent use.
type Service struct {
	cfg      Config
	log      *slog.Logger
	reg      *registry.State
	sessions *Sessions
	methods  map[string]method
	entropy  io.Reader   // locked monotonic ULID entropy
	rates    rateWindows // messagesPerMinute on this node (clientlimits.go)
	auth     Authenticator
	fence    fence        // read-your-writes (fence.go)
	orphans  *orphanWatch // Run loop only (orphans.go)

	// anonLimit bounds new anonymous sessions per address (anonlimit.go);
	// nil: no limit.
	anonLimit *anonSessionLimiter
}

// method is one row of the method table.
type method struct {
	fn func(ctx context.Context, c *rpc.Conn, cs *connState, raw json.RawMessage) (any, error)
	// callers lists the participant types allowed (map-protocol.md §4
	// callableBy); system participants may call everything.
	callers []string
	// capability, when set, is the capability the method requires (§3.3).
	capability func(*Capabilities) bool
	capName    string
	// targetsAgent: params.agentId names an existing agent the method acts
	// on. A caller refused for its type or capabilities gets 2001 when
	// that agent does not exist, as every caller does (refusal must not
	// turn "no such agent" into "not allowed").
	targetsAgent bool
	// action is the client-permission action the method is (clientlimits.go).
	action string
	// fenceTolerant: the method waits only for the non-neutral writes
	// this node answered (fence.go, neutralWrite).
	fenceTolerant bool
}

var (
	callersCAG  = []string{TypeClient, TypeAgent, TypeGateway}
	callersCA   = []string{TypeClient, TypeAgent}
	callersCAS  = []string{TypeClient, TypeAgent} // + system, always allowed
	callersA    = []string{TypeAgent}
	canObserve  = func(c *Capabilities) bool { return c.Observation.CanObserve }
	canQuery    = func(c *Capabilities) bool { return c.Observation.CanQuery }
	canSend     = func(c *Capabilities) bool { return c.Messaging.CanSend }
	canRegister = func(c *Capabilities) bool { return c.Lifecycle.CanRegister }
	canSpawn    = func(c *Capabilities) bool { return c.Lifecycle.CanSpawn }
	canUnreg    = func(c *Capabilities) bool { return c.Lifecycle.CanUnregister }
	canStop     = func(c *Capabilities) bool { return c.Lifecycle.CanStop }
	canCreate   = func(c *Capabilities) bool { return c.Scopes.CanCreateScopes }
	canManage   = func(c *Capabilities) bool { return c.Scopes.CanManageScopes }
	callersG    = []string{TypeGateway} // + system, always allowed
	canFederate = func(c *Capabilities) bool { return c.Federation.CanFederate }
)

var _ rpc.Handler = (*Service)(nil)

// New validates cfg and builds the Service.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &Service{
		cfg:      cfg,
		log:      lg.With("component", "mapsvc", "node_id", cfg.NodeID),
		reg:      cfg.Registry,
		sessions: cfg.Sessions,
		entropy:  &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(rand.Reader, 0)},
		orphans:  newOrphanWatch(cfg.OrphanGrace),

		anonLimit: newAnonSessionLimiter(cfg.AnonymousSessionRate, cfg.AnonymousSessionBurst, maxAnonLimiterIPs),
	}
	if s.sessions == nil {
		s.sessions = NewSessions()
	}
	if s.auth = cfg.Authenticator; s.auth == nil {
		s.auth = openAuthenticator{}
	}
	s.methods = s.methodTable()
	if err := validateExtensions(&cfg, s.methods); err != nil {
		return nil, err
	}
	s.mountExtensions(s.methods)
	return s, nil
}

func (s *Service) methodTable() map[string]method {
	m := map[string]method{
		"map/disconnect":   {fn: s.disconnect, callers: callersCAG},
		"map/auth/refresh": {fn: s.authRefresh, callers: callersCAG},
		// system only: no other type is listed.
		"map/permissions/update": {fn: s.permissionsUpdate},

		"map/agents/list":       {fn: s.agentsList, callers: callersCAG, capability: canQuery, capName: "observation.canQuery"},
		"map/agents/get":        {fn: s.agentsGet, callers: callersCAG, capability: canQuery, capName: "observation.canQuery"},
		"map/agents/register":   {fn: s.agentsRegister, callers: callersA, capability: canRegister, capName: "lifecycle.canRegister"},
		"map/agents/spawn":      {fn: s.agentsSpawn, callers: callersA, capability: canSpawn, capName: "lifecycle.canSpawn"},
		"map/agents/unregister": {fn: s.agentsUnregister, callers: callersA, capability: canUnreg, capName: "lifecycle.canUnregister", targetsAgent: true},
		"map/agents/update":     {fn: s.agentsUpdate, callers: callersA, targetsAgent: true, fenceTolerant: true},
		"map/agents/stop":       {fn: s.lifecycleVerb(registry.TransitionStop), callers: callersCAS, capability: canStop, capName: "lifecycle.canStop", targetsAgent: true, fenceTolerant: true},
		"map/agents/suspend":    {fn: s.lifecycleVerb(registry.TransitionSuspend), callers: callersCAS, capability: canStop, capName: "lifecycle.canStop", targetsAgent: true, fenceTolerant: true},
		"map/agents/resume":     {fn: s.lifecycleVerb(registry.TransitionResume), callers: callersCAS, capability: canStop, capName: "lifecycle.canStop", targetsAgent: true, fenceTolerant: true},
		"map/structure/graph":   {fn: s.structureGraph, callers: callersCA, capability: canQuery, capName: "observation.canQuery"},

		"map/scopes/list":    {fn: s.scopesList, callers: callersCA, capability: canQuery, capName: "observation.canQuery"},
		"map/scopes/get":     {fn: s.scopesGet, callers: callersCA, capability: canQuery, capName: "observation.canQuery"},
		"map/scopes/members": {fn: s.scopesMembers, callers: callersCA, capability: canQuery, capName: "observation.canQuery"},
		"map/scopes/create":  {fn: s.scopesCreate, callers: callersA, capability: canCreate, capName: "scopes.canCreateScopes"},
		"map/scopes/delete":  {fn: s.scopesDelete, callers: callersA, capability: canManage, capName: "scopes.canManageScopes"},
		"map/scopes/join":    {fn: s.scopesJoin, callers: callersA},
		"map/scopes/leave":   {fn: s.scopesLeave, callers: callersA},
	}
	if s.cfg.Router != nil {
		m["map/send"] = method{fn: s.send, callers: callersCA, capability: canSend, capName: "messaging.canSend"}
	}
	if s.cfg.Gateway != nil {
		m["map/federation/connect"] = method{fn: s.federationConnect, callers: callersG, capability: canFederate, capName: "federation.canFederate"}
		m["map/federation/route"] = method{fn: s.federationRoute, callers: callersG, capability: canFederate, capName: "federation.canFederate"}
	}
	if f := s.cfg.Fanout; f != nil {
		// obs: the observation methods. Subscribe and Unsubscribe write
		// for the session, quoting the connection's attach epoch.
		obs := func(fn func(ctx context.Context, cs *connState, raw json.RawMessage) (any, error)) method {
			return method{fn: func(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
				return fn(ctx, cs, raw)
			}, callers: callersCAG, capability: canObserve, capName: "observation.canObserve"}
		}
		ack := method{fn: func(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
			return nil, f.Ack(ctx, cs.sessionID, raw)
		}, callers: callersCAG}
		m["map/subscribe"] = obs(func(ctx context.Context, cs *connState, raw json.RawMessage) (any, error) {
			if err := s.subscriptionLimitRefusal(cs); err != nil {
				return nil, err
			}
			return f.Subscribe(ctx, cs.sessionID, cs.epoch, raw)
		})
		m["map/unsubscribe"] = obs(func(ctx context.Context, cs *connState, raw json.RawMessage) (any, error) {
			return f.Unsubscribe(ctx, cs.sessionID, cs.epoch, raw)
		})
		m["map/replay"] = obs(func(ctx context.Context, cs *connState, raw json.RawMessage) (any, error) {
			return f.Replay(ctx, cs.sessionID, raw)
		})
		m["map/subscribe.ack"] = ack
		m["map/ack"] = ack
	}
	withMethodActions(m)
	return m
}

// Sessions returns the table of sessions attached to this node; it
// implements LocalSessions for node/router and node/fanout.
func (s *Service) Sessions() *Sessions { return s.sessions }

// notificationMethods are the map/ methods a participant sends as
// notifications (map-protocol.md §2.3, §5.7).
var notificationMethods = map[string]bool{"map/subscribe.ack": true, "map/ack": true}

// Handle implements rpc.Handler.
func (s *Service) Handle(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	if req.IsNotification() && strings.HasPrefix(req.Method, "map/") && !notificationMethods[req.Method] {
		// Every other map/ method is a request (§2.3). Sent without an id
		// it could earn no error, so it must change nothing: a
		// map/connect would otherwise open a session the peer never
		// learns of, a register write an agent it got no answer about.
		s.log.Debug("map request sent as a notification ignored", "method", req.Method)
		return nil, nil
	}
	if req.Method == "map/connect" {
		// connect waits for the rest of the fence itself if it reads
		// sessions or agents (connectReadsRegistry).
		if err := s.awaitFence(ctx, fenceConnect); err != nil {
			return nil, translate(err)
		}
		res, err := s.connect(ctx, c, req.Params)
		return res, translate(err)
	}
	m, ok := s.methods[req.Method]
	if !ok {
		return nil, rpc.NewError(rpc.CodeMethodNotFound, "").WithDetails(map[string]any{"method": req.Method})
	}
	st := stateOf(c)
	if st == nil {
		return nil, errNotConnected
	}
	// Read-your-writes: this replica first applies what this node
	// already answered (fence.go).
	lvl := fenceAll
	if m.fenceTolerant {
		lvl = fenceStrict
	}
	if err := s.awaitFence(ctx, lvl); err != nil {
		return nil, translate(err)
	}
	cs := st.handlerSnapshot()
	if cs.sessionID == "" {
		return nil, errNotConnected
	}
	if cs.participantType != TypeSystem && !contains(m.callers, cs.participantType) {
		return nil, s.refuse(m, req.Params, "participant type "+cs.participantType+" may not call "+req.Method)
	}
	if m.capability != nil {
		if caps := s.effectiveCaps(cs); !m.capability(&caps) {
			return nil, s.refuse(m, req.Params, "requires capability "+m.capName)
		}
	}
	if !exemptFromRevocation[req.Method] {
		if err := s.credentialRefusal(cs); err != nil {
			return nil, err
		}
	}
	if err := s.clientPermissionRefusal(cs, m, req.Params); err != nil {
		return nil, err
	}
	res, err := m.fn(ctx, c, cs, req.Params)
	return res, translate(err)
}

// refuse is the permission error of a call refused before it ran, or 2001
// when the method acts on an agent that does not exist.
func (s *Service) refuse(m method, raw json.RawMessage, reason string) error {
	if m.targetsAgent {
		p := decodeParams(raw)
		if id := p.str("agentId"); p.err() == nil && id != "" {
			if _, ok := s.reg.Agent(id); !ok {
				return agentNotFound(id)
			}
		}
	}
	return permissionDenied(reason)
}

// stateOf returns the connection's MAP state, nil before map/connect.
func stateOf(c *rpc.Conn) *connState {
	st, _ := c.Value().(*connState)
	return st
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// now returns the service clock in ms since the epoch.
func (s *Service) now() int64 { return s.cfg.Clock().UnixMilli() }

// newID returns a fresh ULID string on the service clock.
func (s *Service) newID() string {
	return ulid.MustNew(uint64(max(s.now(), 0)), s.entropy).String()
}

// meta builds the CommandMeta of a proposal: the service clock and n event
// ids (the registry derives more if the command produces more events).
// The ids are those n newID calls would return, made with a few
// allocations in all instead of two each (newIDs).
func (s *Service) meta(source string, n int) *concordv1.CommandMeta {
	m := &concordv1.CommandMeta{TimestampMs: s.now(), NodeId: s.cfg.NodeID, Source: source}
	m.EventIds = s.newIDs(max(n, 1))
	return m
}

// newIDs returns n ids as newID makes them (one clock reading and one
// entropy read each, in order). They are substrings of one string: every
// write proposes a few, and ulid.MustNew plus String cost two allocations
// per id (the ULID escapes through the entropy interface).
func (s *Service) newIDs(n int) []string {
	ids := make([]ulid.ULID, n)
	for i := range ids {
		ms := uint64(max(s.now(), 0))
		if err := ids[i].SetTime(ms); err != nil {
			panic(err) // as ulid.MustNew
		}
		var err error
		if mr, ok := s.entropy.(ulid.MonotonicReader); ok {
			err = mr.MonotonicRead(ms, ids[i][6:])
		} else {
			_, err = io.ReadFull(s.entropy, ids[i][6:])
		}
		if err != nil {
			panic(err) // as ulid.MustNew
		}
	}
	var small [4 * ulid.EncodedSize]byte // the usual n, on the stack
	var text []byte
	if n <= 4 {
		text = small[:n*ulid.EncodedSize]
	} else {
		text = make([]byte, n*ulid.EncodedSize)
	}
	for i := range ids {
		if err := ids[i].MarshalTextTo(text[i*ulid.EncodedSize : (i+1)*ulid.EncodedSize]); err != nil {
			panic(err) // the slice is EncodedSize long: cannot happen
		}
	}
	all := string(text)
	out := make([]string, n)
	for i := range out {
		out[i] = all[i*ulid.EncodedSize : (i+1)*ulid.EncodedSize]
	}
	return out
}

// propose is proposeFenced without a connection: it returns once the
// local replica applied the command (the Run loop, Closed, catchUp).
func (s *Service) propose(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, error) {
	return s.apply(ctx, false, t, msg)
}

// proposeFenced applies a command for a request. On a follower the answer
// may come from the leader before the local replica applied the command
// (raftstore's result codecs): the node's fence is raised to its index and
// every later request waits for it (fence.go). propose instead waits
// (Config.WaitApplied) until the local replica applied the command. Either
// way a participant reads its own writes on this node.
//
// On the leader the command is first checked against the local replica
// with the registry's own validation (registry.State.Check), so a request
// the registry would refuse writes nothing to the log. Followers skip the
// pre-check: their replica may lag behind writes made through other
// nodes, and a stale refusal would be wrong; there the FSM refuses (the
// entry is committed, the state unchanged).
func (s *Service) proposeFenced(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, error) {
	return s.apply(ctx, true, t, msg)
}

// apply is propose (fenced false) and proposeFenced (true).
func (s *Service) apply(ctx context.Context, fenced bool, t concordv1.CommandType, msg proto.Message) (any, error) {
	if s.cfg.IsLeader() {
		if err := s.reg.Check(t, msg); err != nil {
			return nil, err
		}
	}
	res, index, err := s.cfg.Store.Apply(ctx, t, msg)
	if err != nil {
		return nil, err
	}
	if fenced {
		s.fence.raise(index, classify(t, msg))
		return res, nil
	}
	if s.cfg.WaitApplied != nil {
		if err := s.cfg.WaitApplied(ctx, index); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// readBarrier honours _meta.consistency = "linearizable" on read methods;
// every other read is served from the local replica.
func (s *Service) readBarrier(ctx context.Context, p *params) error {
	mp := p.sub("_meta")
	mode := mp.str("consistency")
	p.merge(mp)
	if !strings.EqualFold(mode, "linearizable") {
		return nil
	}
	if s.cfg.LinearizableRead == nil {
		return rpc.NewError(rpc.CodeExhausted, "Linearizable reads are not available on this node")
	}
	return s.cfg.LinearizableRead(ctx)
}
