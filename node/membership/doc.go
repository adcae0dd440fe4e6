// Package membership is one Concord node's LAN gossip membership: which
// servers of its system exist, where they listen, and whether they are
// alive, left or dead. It runs hashicorp/memberlist (SWIM with Lifeguard)
// and adds what Concord needs on top.
//
// # What it does
//
//   - Advertises node meta: node id, system id, HTTP/gRPC/Raft addresses,
//     version, role, bootstrap-expect, and two flags (leaving, bootstrapped).
//     The encoding is one format-version byte plus a protobuf message
//     (concordv1.GossipMeta): compact, extensible by new fields, and kept
//     under memberlist's 512-byte meta limit, which Config.Validate checks
//     because memberlist panics on oversized meta.
//   - Filters peers before memberlist stores them (AliveDelegate) and refuses
//     push/pull merges with another system (MergeDelegate). A peer with
//     undecodable meta, a meta node id that differs from its gossip name, or
//     another system id is ignored and logged (rate-limited per peer), never
//     counted. The decoder is fuzzed.
//   - Keeps a member table fed by memberlist's event hooks, so departed
//     members stay visible as left or dead for DeadMemberRetention.
//     memberlist itself forgets them and exposes neither the difference nor
//     suspicion (Node.State is never filled in, hashicorp/memberlist#266).
//     Left versus dead comes from the "leaving" flag: Leave re-advertises
//     the meta with it set, waits for that broadcast, then sends
//     memberlist's leave. There is no suspect status for the same reason.
//   - Delivers join/update/leave/fail events through Subscriptions that
//     never block memberlist (whose hooks run under its node lock): one
//     pending event per member, newest wins, plus a one-slot "changed"
//     signal. Consumers treat it as a level trigger and read Members().
//   - Joins JoinAddrs in the background with exponential backoff and
//     jitter, forever (or until the Start context ends). Success means
//     "another member is known", not "Join returned nil": seed lists
//     usually include the node itself, and joining only oneself must not
//     stop the retries, or servers started together would each stay alone.
//   - Encrypts gossip with an AES keyring seeded by GossipKey and persisted
//     in KeyringFile; InstallKey, UseKey and RemoveKey change it on this
//     node (keyring.go; node/cluster fans a rotation out to every node).
//     Plaintext only when the caller sets AllowPlaintext (`concord server
//     --dev`).
//   - Gives up joining when the seeds refuse this node's key (Fatal,
//     ErrGossipKey), so a start fails in seconds with the real cause.
//
// # What it does not do
//
// It does not change the Raft configuration: the leader's reconciler (in
// node) subscribes here and adds or removes voters. It does not federate
// systems (that is package federation, over gRPC). It does not reach
// other nodes to rotate keys. It does not re-join seeds after the node becomes isolated;
// memberlist's periodic push/pull only reaches nodes it still knows.
//
// # Who calls it
//
// The node composition root builds a Config from node.Config (cmd maps
// flags onto it), calls New, Start, and at exit Leave then Shutdown. The
// Raft bootstrap step calls WaitBootstrapExpect and SetBootstrapped; the
// Raft reconciler calls Subscribe and Members.
//
// # Bootstrapping Raft with bootstrap-expect
//
// A Raft cluster must start from one agreed configuration; two nodes that
// each bootstrap a different one form two clusters. Concord uses the
// approach of Consul and Nomad: no node is special, every server is started
// with the same --bootstrap-expect N, and each server bootstraps with the
// same server list as soon as it sees N servers.
//
// WaitBootstrapExpect returns once N alive servers of this system with the
// same N are known and the first N of them by node id have stayed the same
// for Timings.BootstrapSettle. Sorting by id makes the set independent of
// start and join order, so every initial server computes the identical
// list. Each then calls raft's BootstrapCluster with it. That is safe
// because an identical configuration written by every node is one and the
// same log entry (index 1, term 1) everywhere: the logs agree and an
// ordinary election follows. BootstrapCluster on a node that already has
// Raft state does nothing (it returns raft.ErrCantBootstrap), so a
// restarted server never bootstraps twice. A server outside the first N
// may bootstrap with the same list too, or simply wait: it is not a voter
// in that configuration and the reconciler adds it later.
//
// The one hazard is a node that computes a different list. Two guards
// prevent it:
//
//   - BootstrapSettle: if more than N servers start at once, a node may see
//     N of them before it sees a lower id; the set must stay unchanged for
//     the settle time before it is returned. The contract remains that N is
//     the number of initial servers and that extra servers start later.
//   - The bootstrapped flag: a node with Raft state calls SetBootstrapped
//     (before Start if it restarts with state, right after bootstrapping or
//     being added otherwise). WaitBootstrapExpect returns
//     ErrAlreadyBootstrapped as soon as any alive member advertises it, so
//     a server added to a running cluster never bootstraps a list of its
//     own; it waits for the leader to add it. This is the gossip analogue
//     of Consul asking its peers for their Raft configuration first.
//
// Servers configured with a different N are not counted (an operator
// error, logged), so they can neither complete nor alter the set.
//
// # Timings
//
// Production uses memberlist's LAN defaults (LANTimings: 1 s probes, 200 ms
// gossip). On 50 in-process nodes on loopback (scale_test.go), all started
// within half a second and each listing the same three seeds, every node
// sees every other 2-3 s after the last join, and a killed node is marked
// dead everywhere after 8-10 s: mostly memberlist's suspicion timeout,
// SuspicionMult*log10(N)*ProbeInterval = 6.8 s at N=50.
//
// Give every node the same short seed list. When instead each node of such
// a burst joins one different earlier node, some nodes learn of others only
// at the next push/pull, which memberlist spaces 60 s apart at 50 nodes
// (measured: over a minute to converge).
//
// Tests use TestTimings (100 ms probes, 50 ms gossip) on 127.0.0.1 only.
package membership
