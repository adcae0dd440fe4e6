package cluster

import (
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/raftstore"
)

// The concrete types node wires in satisfy the interfaces declared here,
// and this package's types satisfy the hooks of its siblings.
var (
	_ RaftStore           = (*raftstore.Store)(nil)
	_ RaftConfigurator    = (*raftstore.Store)(nil)
	_ LeaderSource        = (*raftstore.Store)(nil)
	_ SessionReader       = (*registry.State)(nil)
	_ MemberLister        = (*membership.Membership)(nil)
	_ LocalDeliverer      = (*router.Router)(nil)
	_ Keyring             = (*membership.Membership)(nil)
	_ AddrResolver        = (*Directory)(nil)
	_ PeerLister          = (*Directory)(nil)
	_ raftstore.Forwarder = (*Forwarder)(nil)
	_ router.Peers        = (*PeerStreams)(nil)
	_ router.EventSink    = (*EventBroadcaster)(nil)
	_ LocalEvents         = (router.EventSink)(nil)
)
