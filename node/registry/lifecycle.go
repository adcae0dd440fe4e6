package registry

import (
	"encoding/json"
	"regexp"
)

// Agent states (map-protocol.md §5.2). StateOrphaned is the SDK's addition;
// only the registry sets it (disconnect policy).
const (
	StateRegistered = "registered"
	StateActive     = "active"
	StateBusy       = "busy"
	StateIdle       = "idle"
	StateSuspended  = "suspended"
	StateStopping   = "stopping"
	StateStopped    = "stopped"
	StateFailed     = "failed"
	StateOrphaned   = "orphaned"
)

// Lifecycle verbs of AgentUpdateRequest.transition.
const (
	TransitionSuspend = "suspend"
	TransitionResume  = "resume"
	TransitionStop    = "stop"
)

// Disconnect behaviours (DisconnectPolicy.AgentBehavior).
const (
	BehaviorUnregister  = "unregister"
	BehaviorOrphan      = "orphan"
	BehaviorGracePeriod = "grace-period"
)

var customState = regexp.MustCompile(`^x-[a-z][a-z0-9-]*$`)

// ValidState reports whether s is a MAP agent state a participant may set:
// the schema enum or a custom x- state. "orphaned" is server-managed and
// not accepted from participants.
func ValidState(s string) bool {
	switch s {
	case StateRegistered, StateActive, StateBusy, StateIdle, StateSuspended,
		StateStopping, StateStopped, StateFailed:
		return true
	}
	return customState.MatchString(s)
}

// ValidBehavior reports whether b is a known disconnect behaviour.
func ValidBehavior(b string) bool {
	switch b {
	case BehaviorUnregister, BehaviorOrphan, BehaviorGracePeriod:
		return true
	}
	return false
}

// transitionTarget checks a lifecycle verb against the current state and
// returns the new state. Refusals are CodeStateInvalid:
//   - suspend: not from suspended, stopping, stopped or failed;
//   - resume: only from suspended, and lands on idle (the SDK conformance
//     pack expects suspend→suspended, resume→idle, stop→stopped);
//   - stop: from anything but stopped.
func transitionTarget(verb, current string) (string, *Error) {
	switch verb {
	case TransitionSuspend:
		switch current {
		case StateSuspended, StateStopping, StateStopped, StateFailed:
			return "", errf(CodeStateInvalid, "", "cannot suspend an agent in state %q", current)
		}
		return StateSuspended, nil
	case TransitionResume:
		if current != StateSuspended {
			return "", errf(CodeStateInvalid, "", "cannot resume an agent in state %q", current)
		}
		return StateIdle, nil
	case TransitionStop:
		if current == StateStopped {
			return "", errf(CodeStateInvalid, "", "agent is already stopped")
		}
		return StateStopped, nil
	}
	return "", errf(CodeInvalidParams, "transition", "unknown transition %q", verb)
}

// checkStateChange validates a plain state update: the target must be a
// valid state and a stopped agent stays stopped.
func checkStateChange(current, target string) *Error {
	if !ValidState(target) {
		return errf(CodeStateInvalid, "state", "invalid agent state %q", target)
	}
	if current == StateStopped && target != StateStopped {
		return errf(CodeStateInvalid, "state", "agent is stopped; cannot move to %q", target)
	}
	return nil
}

// setState records a state change and its lifecycle times on a (copy of
// an) agent.
func setState(a *Agent, target, reason string, ts int64) {
	a.State = target
	switch target {
	case StateActive, StateBusy:
		if a.Lifecycle.StartedAt == 0 {
			a.Lifecycle.StartedAt = ts
		}
	case StateStopped, StateFailed:
		a.Lifecycle.StoppedAt = ts
		if reason != "" {
			a.Lifecycle.ExitReason = reason
		}
	}
	a.Lifecycle.LastActiveAt = ts
}

// agentAlias has Agent's fields without its methods (no MarshalJSON
// recursion).
type agentAlias Agent

// MarshalJSON renders the MAP Agent object: like the struct tags, except
// that an empty OwnerID (orphaned agent) is JSON null as the SDK expects.
func (a Agent) MarshalJSON() ([]byte, error) {
	var owner *string
	if a.OwnerID != "" {
		owner = &a.OwnerID
	}
	return json.Marshal(struct {
		agentAlias
		OwnerID *string `json:"ownerId"`
	}{agentAlias(a), owner})
}
