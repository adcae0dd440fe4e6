package registry

import (
	"encoding/json"
	"fmt"
	"log/slog"
)

// Config configures a State.
type Config struct {
	// EventWindow is how many of the newest events the state retains for
	// replay (map/replay, subscription resume). Older events are pruned at
	// Apply time, deterministically. Every replica should use the same
	// value: a replica with a smaller window answers "aged out" sooner, but
	// positions and ids stay identical. Memory grows linearly with it.
	EventWindow int

	// RolePermissions is the server's rolePermissions table (map-protocol.md
	// §7): role -> permissions in the shape of permissionOverrides, merged
	// under an agent's own overrides by node/access, which also validates
	// it (access.ParseRolePermissions). Every node should load the same
	// table, or nodes decide differently.
	RolePermissions map[string]json.RawMessage

	// BuildFSMLevel is the FSM level this State enforces and its node
	// advertises: FSMLevel, the default. For tests: a lower one plays an
	// older build (one that halts on a higher recorded level, levels.go);
	// 1..FSMLevel.
	BuildFSMLevel int

	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns production defaults: a 10,000-event window.
func DefaultConfig() Config {
	return Config{EventWindow: 10000, BuildFSMLevel: FSMLevel}
}

// Validate reports a configuration error, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	if c.EventWindow < 1 {
		return fmt.Errorf("%w: EventWindow must be >= 1, got %d", ErrInvalidConfig, c.EventWindow)
	}
	if c.BuildFSMLevel < 1 || c.BuildFSMLevel > FSMLevel {
		return fmt.Errorf("%w: BuildFSMLevel %d outside 1..%d", ErrInvalidConfig, c.BuildFSMLevel, FSMLevel)
	}
	return nil
}
