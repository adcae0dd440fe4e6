// Package raftstore wires hashicorp/raft into Concord: a Store is one raft
// server with an fsync'ed segment log (term and vote in bbolt), file
// snapshots and a TCP transport, and an FSM that routes every committed
// command to the state Module registered for its type.
//
// What it does: propose commands (Apply, ApplyRaw) and return each
// proposer's own result and log index; route committed entries by their
// first byte (a concordv1.CommandType) to module handlers; frame module
// snapshots into one stream and restore them all-or-nothing; bootstrap and
// change membership; report leadership (SubscribeLeadership) and serve the
// read levels (local by default, LinearizableRead on the leader).
//
// What it does not: know anything of MAP, agents or consensus runs (those
// live in modules declared by node and consensus), talk to the leader over
// anything but raft (followers' writes go through the Forwarder that node
// passes in Config.Forwarder; without one a follower returns
// *NotLeaderError), or gossip membership.
//
// Who calls it: package node builds one Store per process with its modules
// and drives bootstrap and membership from memberlist; cluster-test builds
// several, injecting a fault StreamLayer. Tests of other packages use
// NewTestStore for a ready single-node store.
//
// DESIGN.md in this directory explains the decisions.
package raftstore
