package cluster

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// This file declares what the package needs from its siblings, as small
// consumer-side interfaces (STYLE.md §1). node passes the concrete types:
// *raftstore.Store, *membership.Membership, *router.Router, *fanout.Hub,
// *registry.State.

// AddrResolver maps a node id to the gRPC address peers dial. ok is false
// when the node is not an alive member (unknown, dead or left).
// Implemented by *Directory.
type AddrResolver interface {
	GRPCAddr(nodeID string) (addr string, ok bool)
}

// PeerLister lists the alive peers of this node (itself excluded), to
// which message events are broadcast. Implemented by *Directory.
type PeerLister interface {
	Peers() []string
}

// MemberLister lists the gossip members of this system, the local node
// included. Implemented by *membership.Membership.
type MemberLister interface {
	Members() []membership.Member
}

// LeaderSource reports the current Raft leader as the local store knows it
// (id, Raft address; empty when none). Implemented by *raftstore.Store.
type LeaderSource interface {
	Leader() (id, addr string)
}

// LocalDeliverer hands a relayed message to a recipient attached to this
// node. Implemented by *router.Router (DeliverLocal). It must not block
// for long (it runs on the stream's handler, in order) and must not retain
// env after it returns (the Server reuses it). Its errors
// router.ErrNotConnected, rpc.ErrSlowConsumer, rpc.ErrClosed and
// router.ErrBadEnvelope are reported back to the sender by code.
type LocalDeliverer interface {
	DeliverLocal(ctx context.Context, env *router.Envelope) error
}

// EventSink receives the ephemeral message events relayed from other nodes.
// Implemented by *fanout.Hub. It must not block.
type EventSink interface {
	PublishEphemeral(ev registry.Event)
}

// RaftStore is what the Server needs from the local Raft store.
// Implemented by *raftstore.Store.
type RaftStore interface {
	ID() string
	// ApplyForwardedFrom (raftstore's ApplyRaw plus the encoded outcome)
	// must not forward to the leader itself: a Forward reaching a node
	// that is no longer leader answers NOT_LEADER and the origin retries,
	// instead of hopping on. origin is the forwarding node's ID: a client
	// there waits for the command to come back, which the leader's pacing
	// of replication to non-voters takes into account.
	ApplyForwardedFrom(ctx context.Context, origin string, cmd []byte) (raftstore.ForwardReply, error)
	Leader() (id, addr string)
	State() raftstore.State
	AppliedIndex() uint64
	Configuration(ctx context.Context) ([]raftstore.Server, error)
	RemoveServer(ctx context.Context, id string) error
	Stats() map[string]string
}

// RaftConfigurator is what the Reconciler needs from the local Raft store.
// Implemented by *raftstore.Store.
type RaftConfigurator interface {
	Configuration(ctx context.Context) ([]raftstore.Server, error)
	AddVoter(ctx context.Context, id, addr string) error
	AddNonvoter(ctx context.Context, id, addr string) error
	DemoteVoter(ctx context.Context, id string) error
	// Stats gives the leader's own last_log_index to the health checks.
	Stats() map[string]string
	RemoveServer(ctx context.Context, id string) error
	SubscribeLeadership() (<-chan bool, func())
	Apply(ctx context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error)
}

// SessionReader is what the Reconciler reads from the registry replica to
// detach the sessions of a departed node. Implemented by *registry.State.
type SessionReader interface {
	// ConnectedHomes and ConnectedSessionsOn cost the homes and the
	// sessions of the homes asked about, not all the sessions: the
	// reconciler reads them every interval on every node.
	ConnectedHomes() []string
	ConnectedSessionsOn(nodeID string) []registry.Session
	Session(id string) (registry.Session, bool)
	// SessionEpoch is the attach epoch SESSION_DETACH must quote.
	SessionEpoch(id string) (uint64, bool)
	// SessionAgents sizes the event ids the detach needs.
	SessionAgents(sessionID string) []registry.Agent
}

// Keyring is the node's gossip keyring, changed by the Admin service.
// Implemented by *membership.Membership; its errors wrap
// membership.ErrNoKeyring and membership.ErrKeyring.
type Keyring interface {
	// Keys returns the installed keys, the primary first.
	Keys() [][]byte
	InstallKey(key []byte) error
	UseKey(key []byte) error
	RemoveKey(key []byte) error
}
