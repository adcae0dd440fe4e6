package mapclient

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/concordmap/concord/node/rpc"
)

// Participant types a client may connect as.
const (
	TypeAgent  = "agent"
	TypeClient = "client"
)

// DisconnectPolicy is map/connect's disconnectPolicy: what the server does
// with the session's agents when the connection is lost.
type DisconnectPolicy struct {
	// AgentBehavior is "unregister", "orphan" or "grace-period".
	AgentBehavior string `json:"agentBehavior"`
	// GracePeriodMs is how long a grace-period session's agents stay
	// registered after a loss (0: the server's default).
	GracePeriodMs int64 `json:"gracePeriodMs,omitempty"`
}

// Config configures a Client. Start from DefaultConfig.
type Config struct {
	// URLs are the MAP WebSocket endpoints (ws:// or wss://) of the nodes of
	// one system, tried in order. At least one is required.
	URLs []string
	// ParticipantType is "agent" or "client".
	ParticipantType string
	// ParticipantID, optional, is sent as map/connect participantId (an
	// agent process usually passes its agent id).
	ParticipantID string
	// Name is the participant's display name (optional).
	Name string
	// Auth, when set, is the credential sent with every map/connect (the
	// node binds the participant id and type to it). nil connects
	// anonymously (auth method none), which only nodes that allow it
	// accept.
	Auth *Auth
	// DisconnectPolicy, when set, is sent with every map/connect. Agents that
	// must survive a failover want grace-period with a grace period longer
	// than ReconnectTimeout.
	DisconnectPolicy *DisconnectPolicy

	// AttemptTimeout bounds one dial plus map/connect to one URL. A dead
	// node costs this much before the next URL is tried.
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause between two passes over
	// every URL (exponential, with up to 50% jitter). Short values find a
	// recovered node sooner; long ones load a struggling cluster less.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// ReconnectTimeout is how long the supervisor keeps trying after a
	// connection loss before it gives up (Done closes, Err is set). It also
	// bounds the restore (re-register, re-subscribe) after a reconnect.
	ReconnectTimeout time.Duration

	// RPC configures the JSON-RPC peer of each connection.
	RPC rpc.ClientConfig

	// OnMessage receives map/message notifications (agents). It runs on the
	// connection's reader goroutine: return quickly, never call the Client
	// from it synchronously. nil drops messages.
	OnMessage func(Message)
	// OnReconnect is called from the supervisor goroutine after a reconnect
	// and its restore completed. Optional.
	OnReconnect func(ReconnectInfo)

	// Logger receives connection lifecycle logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns production values; URLs and ParticipantType must
// still be set.
func DefaultConfig() Config {
	return Config{
		ParticipantType:  TypeClient,
		AttemptTimeout:   5 * time.Second,
		MinBackoff:       100 * time.Millisecond,
		MaxBackoff:       5 * time.Second,
		ReconnectTimeout: 2 * time.Minute,
		RPC:              rpc.DefaultClientConfig(),
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if len(c.URLs) == 0 {
		return bad("URLs: at least one server URL is required")
	}
	for _, u := range c.URLs {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "ws" && pu.Scheme != "wss") || pu.Host == "" {
			return bad("URLs: %q is not a ws:// or wss:// URL", u)
		}
	}
	switch {
	case c.ParticipantType != TypeAgent && c.ParticipantType != TypeClient:
		return bad("ParticipantType must be %q or %q, got %q", TypeAgent, TypeClient, c.ParticipantType)
	case c.AttemptTimeout <= 0:
		return bad("AttemptTimeout must be > 0")
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return bad("need 0 < MinBackoff <= MaxBackoff")
	case c.ReconnectTimeout <= 0:
		return bad("ReconnectTimeout must be > 0")
	}
	if err := c.RPC.Validate(); err != nil {
		return bad("RPC: %v", err)
	}
	return nil
}

// Auth is a map/connect credential (map-protocol.md §3.6).
type Auth struct {
	// Method is "api-key" or "bearer".
	Method string `json:"method"`
	// Token is the API key or the bearer token. Never logged.
	Token string `json:"token"`
}
