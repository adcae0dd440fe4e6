package mapsvc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/concordmap/concord/node/rpc"
)

// MethodFunc serves one extension method mounted through
// Config.ExtensionMethods. from identifies the caller's session (as for
// map/send); params are the raw request params. Return an *rpc.Error to
// answer with exactly that error. It is a type alias, so a package that
// provides methods can declare the same func type without importing
// mapsvc.
type MethodFunc = func(ctx context.Context, from Sender, params json.RawMessage) (any, error)

// ServiceEndpoint receives map/send requests addressed to an in-process
// service id (Config.Services) instead of the router: the node that
// received the send handles it itself, whichever node is the addressed
// agent's home. HandleSend returns the map/send result or an *rpc.Error.
// It is called on the sender's connection goroutine, in order per
// connection, and must be safe for concurrent use across connections.
type ServiceEndpoint interface {
	HandleSend(ctx context.Context, from Sender, params json.RawMessage) (any, error)
}

// validateExtensions checks the extension methods and services of cfg
// against the core method table.
func validateExtensions(cfg *Config, core map[string]method) error {
	for name, fn := range cfg.ExtensionMethods {
		switch {
		case name == "" || fn == nil:
			return fmt.Errorf("%w: ExtensionMethods: empty name or nil function", ErrInvalidConfig)
		case name == "map/connect" || name == "map/send":
			return fmt.Errorf("%w: ExtensionMethods: %q is a core method", ErrInvalidConfig, name)
		}
		if _, ok := core[name]; ok {
			return fmt.Errorf("%w: ExtensionMethods: %q is a core method", ErrInvalidConfig, name)
		}
	}
	for id, ep := range cfg.Services {
		if id == "" || ep == nil {
			return fmt.Errorf("%w: Services: empty id or nil endpoint", ErrInvalidConfig)
		}
	}
	return nil
}

// mountExtensions adds the extension methods to the method table. They are
// callable by client, agent and gateway participants (system always) once
// connected; the function itself checks anything finer.
func (s *Service) mountExtensions(m map[string]method) {
	for name, fn := range s.cfg.ExtensionMethods {
		m[name] = method{fn: func(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
			return fn(ctx, s.sender(cs), raw)
		}, callers: callersCAG}
	}
}

// serviceFor returns the endpoint a map/send is addressed to when its `to`
// is a service id: the string "<id>" or "agent:<id>", or {"agent": "<id>"}.
// The common case (no service named in the params) costs one bytes.Contains
// per service id and no decoding.
func (s *Service) serviceFor(raw json.RawMessage) (ServiceEndpoint, bool) {
	if len(s.cfg.Services) == 0 {
		return nil, false
	}
	named := false
	for id := range s.cfg.Services {
		if bytes.Contains(raw, []byte(id)) {
			named = true
			break
		}
	}
	if !named {
		return nil, false
	}
	var p struct {
		To json.RawMessage `json:"to"`
	}
	if json.Unmarshal(raw, &p) != nil || len(p.To) == 0 {
		return nil, false
	}
	var id string
	switch p.To[0] {
	case '"':
		if json.Unmarshal(p.To, &id) != nil {
			return nil, false
		}
		if rest, ok := strings.CutPrefix(id, "agent:"); ok {
			if _, svc := s.cfg.Services[rest]; svc {
				id = rest
			}
		}
	case '{':
		var addr map[string]json.RawMessage
		if json.Unmarshal(p.To, &addr) != nil || len(addr) != 1 || addr["agent"] == nil {
			return nil, false
		}
		if json.Unmarshal(addr["agent"], &id) != nil {
			return nil, false
		}
	default:
		return nil, false
	}
	ep, ok := s.cfg.Services[id]
	return ep, ok
}
