package membership

import "errors"

var (
	// ErrInvalidConfig is returned by Config.Validate and New when a field is
	// missing or out of range; the wrapped message names the field.
	ErrInvalidConfig = errors.New("membership: invalid config")

	// ErrInvalidMeta is returned by the node meta decoder when a peer's meta
	// is malformed, too large or fails validation. Such a peer is ignored.
	ErrInvalidMeta = errors.New("membership: invalid node meta")

	// ErrMetaVersion is returned (wrapping ErrInvalidMeta) when a peer's meta
	// carries a format version this binary does not understand.
	ErrMetaVersion = errors.New("membership: unsupported node meta version")

	// ErrForeignSystem is returned by the gossip filters when a peer belongs
	// to another system; memberlist then refuses to track or merge it.
	ErrForeignSystem = errors.New("membership: peer belongs to another system")

	// ErrNotStarted is returned by Leave and WaitBootstrapExpect before Start.
	ErrNotStarted = errors.New("membership: not started")

	// ErrAlreadyStarted is returned by a second call to Start.
	ErrAlreadyStarted = errors.New("membership: already started")

	// ErrShutdown is returned by Start, Leave and WaitBootstrapExpect once
	// Shutdown has been called (or when Shutdown interrupts the wait).
	ErrShutdown = errors.New("membership: shut down")

	// ErrLeft is returned by a Leave call after an earlier Leave began.
	ErrLeft = errors.New("membership: already left")

	// ErrAlreadyBootstrapped is returned by WaitBootstrapExpect when this
	// node or an alive peer advertises Raft state: the cluster exists, so
	// this node must not bootstrap and will be added by the leader instead.
	ErrAlreadyBootstrapped = errors.New("membership: a member already has raft state")

	// ErrGossipKey is the Fatal error when seeds and this node cannot
	// decrypt each other's gossip: they hold different keys (or one side
	// encrypts and the other does not). Retrying cannot help.
	ErrGossipKey = errors.New("membership: gossip key mismatch")

	// ErrNoKeyring is returned by the keyring operations when gossip runs
	// in plaintext: there is no keyring to change.
	ErrNoKeyring = errors.New("membership: gossip is not encrypted")

	// ErrKeyring is returned (wrapped, with memberlist's reason) when a
	// keyring operation is refused: a key of the wrong size, using a key
	// that is not installed, removing the primary key.
	ErrKeyring = errors.New("membership: keyring operation refused")

	// ErrBootstrapDisabled is returned by WaitBootstrapExpect when
	// Config.BootstrapExpect is 0.
	ErrBootstrapDisabled = errors.New("membership: bootstrap-expect not configured")
)
