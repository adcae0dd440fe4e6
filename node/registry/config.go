package registry

import (
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

	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns production defaults: a 10,000-event window.
func DefaultConfig() Config {
	return Config{EventWindow: 10000}
}

// Validate reports a configuration error, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	if c.EventWindow < 1 {
		return fmt.Errorf("%w: EventWindow must be >= 1, got %d", ErrInvalidConfig, c.EventWindow)
	}
	return nil
}
