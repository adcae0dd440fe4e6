// Package cluster is the node-to-node half of a Concord system: the gRPC
// Cluster service (proto/concord/v1/cluster.proto), the operator's Admin
// service (admin.proto: gossip keyring) and their clients.
//
// What it does:
//   - Forwarder: the raftstore.Config.Forwarder hook. A follower's write is
//     sent to the leader, batched with concurrent ones on one long-lived
//     Cluster.ForwardStream per leader (unary Cluster.Forward to a leader
//     without it), which proposes the raw command
//     and answers with its log index and, when the module has a result
//     codec, its encoded outcome; raftstore then answers with that, or
//     waits for the index locally and returns the result its own FSM
//     computed. Retries while
//     nothing can have been proposed; gives up with ErrNoLeader.
//   - PeerStreams: router.Peers over one long-lived, batched bidirectional stream
//     per peer, with a per-envelope delivery outcome from the peer's ack;
//     also relays ephemeral message events to the peers that hold
//     subscriptions (EventBroadcaster).
//   - Server: the grpc.Server with the Cluster service: Forward and
//     ForwardStream, the
//     receiving side of the Relay stream (LocalDeliverer, EventSink), and the admin
//     RPCs for the CLI (Members, RaftPeers, RemovePeer, Status); and the
//     Admin service, whose keyring changes fan out to every alive member
//     (admin_keyring.go). Both are doors: Forward refuses commands the
//     leader cannot vouch for (raftstore.ApplyRaw, through ApplyForwardedFrom), the Relay receiver
//     refuses frames that are not MAP messages (relay_check.go), and a
//     forced RemovePeer needs the admin marker (admin.go, which also names
//     the admin methods for an authorization layer). LeaderConfiguration
//     asks peers' RaftPeers for the leader's view, so a node whose removal
//     entry never arrived can say it was removed (leaderconfig.go).
//   - Reconciler: the leader's loop that keeps the Raft configuration in
//     line with gossip membership and detaches the sessions of nodes that
//     left, or stayed dead for Config.SessionDetachGrace. With Config.RaftVoters it is also the autopilot: new
//     servers join as non-voters, and health checks (health.go) drive
//     promotions and demotions (autopilot.go) toward that many voters.
//   - The Operator service (operator.go): the autopilot's health report
//     (`concord operator health`) and drains (`concord operator drain`,
//     carried out by node through the Drainer interface).
//   - Directory: a cached view of membership for the hot path (which node
//     is alive, where it listens).
//
// What it does not: gossip (node/membership), Raft (raftstore), MAP
// semantics (node/router, node/mapsvc, node/fanout), federation between
// systems, or security: node passes mutual TLS in (Config.PeerCredentials
// for dialing, grpc.Creds and the node/authz interceptors through
// Config.ServerOptions).
//
// Who calls it: the composition root node.Server builds every part, passes
// the Forwarder into raftstore.Config, the PeerStreams into router.Config (Peers), the
// EventBroadcaster as the router's EventSink, and runs Server.Serve,
// Directory.Run and Reconciler.Run on goroutines it owns. DESIGN.md in this
// directory explains the decisions and the wiring order.
package cluster
