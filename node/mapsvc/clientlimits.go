package mapsvc

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// Client permissions (map-protocol.md §7 layer 2): the actions a
// participant may take and the limits it must stay under, set by a
// system participant with map/permissions/update and replicated in Raft
// (node/acl), so every node refuses the same calls. A withdrawn action is
// stored beside the withdrawn capability flags as "actions.<name>".

// Client-permission actions (the SDK's ClientPermissions.actions).
const (
	ActionSendMessages      = "sendMessages"
	ActionRegisterAgents    = "registerAgents"
	ActionUnregisterAgents  = "unregisterAgents"
	ActionCreateScopes      = "createScopes"
	ActionDeleteScopes      = "deleteScopes"
	ActionModifyScopes      = "modifyScopes"
	ActionSteerAgents       = "steerAgents"
	ActionFederationConnect = "federationConnect"
)

// methodActions names the action each method is; a method not listed is
// governed by capabilities and agent permissions only.
var methodActions = map[string]string{
	"map/send":               ActionSendMessages,
	"map/agents/register":    ActionRegisterAgents,
	"map/agents/spawn":       ActionRegisterAgents,
	"map/agents/unregister":  ActionUnregisterAgents,
	"map/scopes/create":      ActionCreateScopes,
	"map/scopes/delete":      ActionDeleteScopes,
	"map/scopes/join":        ActionModifyScopes,
	"map/scopes/leave":       ActionModifyScopes,
	"map/agents/stop":        ActionSteerAgents,
	"map/agents/suspend":     ActionSteerAgents,
	"map/agents/resume":      ActionSteerAgents,
	"map/federation/connect": ActionFederationConnect,
	"map/federation/route":   ActionFederationConnect,
}

// Client-permission limits (the SDK's ClientPermissions.limits).
const (
	LimitSubscriptions     = "subscriptions"
	LimitMessagesPerMinute = "messagesPerMinute"
	LimitAgentsRegistered  = "agentsRegistered"
	LimitScopesCreated     = "scopesCreated"
)

// MaxLimit bounds a limit value (larger is as good as unlimited).
const MaxLimit = math.MaxInt32

// KnownAction reports whether name is a client-permission action.
func KnownAction(name string) bool {
	for _, a := range methodActions {
		if a == name {
			return true
		}
	}
	return false
}

// KnownPermission reports whether name is a flag map/permissions/update
// may withdraw: a capability ("lifecycle.canStop") or an action
// ("actions.sendMessages").
func KnownPermission(name string) bool {
	if a, ok := strings.CutPrefix(name, "actions."); ok {
		return KnownAction(a)
	}
	return KnownCapability(name)
}

// KnownLimit reports whether name is a client-permission limit.
func KnownLimit(name string) bool {
	switch name {
	case LimitSubscriptions, LimitMessagesPerMinute, LimitAgentsRegistered, LimitScopesCreated:
		return true
	}
	return false
}

func withMethodActions(m map[string]method) {
	for name, a := range methodActions {
		if r, ok := m[name]; ok {
			r.action = a
			m[name] = r
		}
	}
}

// clientPermissionRefusal refuses a call the participant's client
// permissions forbid: 1003 naming a withdrawn action, 4002 over a count
// limit, 4001 over messagesPerMinute. Read at every call, so an update
// applies at once to open sessions on every node.
func (s *Service) clientPermissionRefusal(cs *connState, m method, raw json.RawMessage) error {
	pp := s.cfg.ParticipantPermissions
	if pp == nil || m.action == "" {
		return nil
	}
	for _, f := range pp.Denied(cs.participantID) {
		if f == "actions."+m.action {
			err := s.refuse(m, raw, "action "+m.action+" is not permitted")
			if e, ok := err.(*rpc.Error); ok && e.Code == rpc.CodePermissionDenied {
				return e.WithDetails(map[string]any{"action": m.action})
			}
			return err // 2001: the agent acted on does not exist
		}
	}
	limits := pp.Limits(cs.participantID)
	if len(limits) == 0 {
		return nil
	}
	switch m.action {
	case ActionSendMessages:
		if max, ok := limits[LimitMessagesPerMinute]; ok && !s.rates.allow(cs.participantID, max, s.cfg.Clock()) {
			return rpc.NewError(rpc.CodeRateLimited, "").WithDetails(map[string]any{
				"limit": LimitMessagesPerMinute, "max": max, "retryAfterMs": 1000})
		}
	case ActionRegisterAgents:
		if max, ok := limits[LimitAgentsRegistered]; ok {
			n := len(s.reg.AgentsWhere(func(a *registry.Agent) bool { return a.OwnerID == cs.participantID }))
			if int64(n) >= max {
				return limitExceeded(LimitAgentsRegistered, max)
			}
		}
	case ActionCreateScopes:
		if max, ok := limits[LimitScopesCreated]; ok {
			n := 0
			for _, sc := range s.reg.Scopes() {
				if sc.OwnerID == cs.participantID {
					n++
				}
			}
			if int64(n) >= max {
				return limitExceeded(LimitScopesCreated, max)
			}
		}
	}
	return nil
}

// subscriptionLimitRefusal refuses map/subscribe past the session's cap
// (Config.MaxSessionSubscriptions) or the participant's subscriptions
// limit, counted over all its sessions in the registry.
func (s *Service) subscriptionLimitRefusal(cs *connState) error {
	if max := s.cfg.MaxSessionSubscriptions; max > 0 {
		if sess, ok := s.reg.Session(cs.sessionID); ok && len(sess.Subscriptions) >= max {
			return limitExceeded(LimitSubscriptions, int64(max))
		}
	}
	pp := s.cfg.ParticipantPermissions
	if pp == nil {
		return nil
	}
	max, ok := pp.Limits(cs.participantID)[LimitSubscriptions]
	if !ok {
		return nil
	}
	n := 0
	for _, sess := range s.reg.Sessions() {
		if sess.ParticipantID == cs.participantID {
			n += len(sess.Subscriptions)
		}
	}
	if int64(n) >= max {
		return limitExceeded(LimitSubscriptions, max)
	}
	return nil
}

func limitExceeded(name string, max int64) *rpc.Error {
	return rpc.NewError(rpc.CodeQuotaExceeded, "").WithDetails(map[string]any{"limit": name, "max": max})
}

// rateWindows counts each participant's messages on this node with a
// sliding-window counter (the previous minute weighted by how much of it
// still overlaps the window): O(1) per participant, close to exact.
type rateWindows struct {
	mu sync.Mutex
	m  map[string]*rateWindow
}

// rateSweepAt is the table size past which idle entries are dropped.
const rateSweepAt = 1024

type rateWindow struct {
	start     time.Time // start of the current minute bucket
	cur, prev int64
}

func (r *rateWindows) allow(pid string, max int64, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*rateWindow{}
	}
	w := r.m[pid]
	if w == nil {
		if len(r.m) >= rateSweepAt {
			for id, o := range r.m { // forget participants idle for two minutes
				if now.Sub(o.start) >= 2*time.Minute {
					delete(r.m, id)
				}
			}
		}
		w = &rateWindow{start: now}
		r.m[pid] = w
	}
	switch el := now.Sub(w.start); {
	case el >= 2*time.Minute:
		w.start, w.prev, w.cur = now, 0, 0
	case el >= time.Minute:
		w.start, w.prev, w.cur = w.start.Add(time.Minute), w.cur, 0
	}
	overlap := 1 - float64(now.Sub(w.start))/float64(time.Minute)
	if float64(w.prev)*overlap+float64(w.cur) >= float64(max) {
		return false
	}
	w.cur++
	return true
}
