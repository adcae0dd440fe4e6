package mapsvc

import (
	"errors"

	"github.com/concordmap/concord/node/internal/storeerr"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// ErrInvalidConfig wraps every Config.Validate failure.
var ErrInvalidConfig = errors.New("mapsvc: invalid config")

// ReasonSessionMoved is details.reason of the retryable 4000 a resume,
// or a write a connection makes for its session, gets when the session
// was resumed, detached or closed between this node's read (the
// connection's attach) and the commit (registry.ErrSessionMoved).
const ReasonSessionMoved = "session_moved"

// Errors sent to participants for conditions of this layer.
var (
	// errNotConnected: any method but map/connect before map/connect.
	errNotConnected = rpc.NewError(rpc.CodeAuthRequired, "Authentication required: call map/connect first")
	// errAlreadyConnected: a second map/connect for another session.
	errAlreadyConnected = rpc.NewError(rpc.CodeInvalidRequest, "Connection already has a session; call map/disconnect first")
)

func agentNotFound(id string) *rpc.Error {
	return rpc.NewError(rpc.CodeAgentNotFound, "Agent not found: "+id).WithDetails(map[string]any{"agentId": id})
}

func permissionDenied(reason string) *rpc.Error {
	return rpc.NewError(rpc.CodePermissionDenied, "").WithDetails(map[string]any{"reason": reason})
}

// translate maps an error from proposing or reading to the MAP error the
// participant sees: registry domain errors keep their code; "no leader",
// timeouts and shutdown become a retryable 4000 (map-protocol.md §10
// Q4.5: the minority side rejects writes with retryable 4000); anything
// else is internal (-32603, logged by node/rpc).
func translate(err error) error {
	if err == nil {
		return nil
	}
	var rerr *rpc.Error
	if errors.As(err, &rerr) {
		return rerr
	}
	var re *registry.Error
	if errors.As(err, &re) {
		if re.Code == registry.CodeInvalidParams {
			return rpc.InvalidParams(re.Field, re.Message)
		}
		if errors.Is(re, registry.ErrSessionMoved) {
			// Retryable 4000, with a reason like the store's (storeerr).
			return rpc.NewError(rpc.CodeExhausted, "Session moved on, retry").
				WithDetails(map[string]any{"reason": ReasonSessionMoved, "error": re.Message})
		}
		e := rpc.NewError(re.Code, re.Message)
		if re.Field != "" {
			e = e.WithDetails(map[string]any{"field": re.Field})
		}
		return e
	}
	if e, ok := storeerr.Unavailable(err); ok {
		return e
	}
	return err
}

// asRPCError renders any error as a MAP error object (for embedding in a
// result); non-MAP errors become -32603 without their text.
func asRPCError(err error) *rpc.Error {
	var rerr *rpc.Error
	if errors.As(translate(err), &rerr) {
		return rerr
	}
	return rpc.NewError(rpc.CodeInternal, "")
}
