package mapsvc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/concordmap/concord/node/rpc"
)

// MethodFunc serves one extension method mounted through
// Config.ExtensionMethods. from identifies the caller's session (as for
// map/send); params are the raw request params. Return an *rpc.Error to
// answer with exactly that error. It is a type alias, so a package that
// provides methods can declare the same func type without importing
// mapsvc.
type MethodFunc = func(ctx context.Context, from Sender, params json.RawMessage) (any, error)

// validateExtensions checks the extension methods of cfg
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
