// Package faultnet injects network faults between the nodes of an
// in-process cluster test: partitions, isolation, added latency and dropped
// connections.
//
// A Network knows, for every connection made through it, which node dialed
// and which node it reached: addresses are mapped to node ids as nodes bind
// (Listener, Register), and the dialer's local address is remembered so the
// accepting side can name its peer too. Each node gets a raft.StreamLayer
// (StreamLayer) and a gRPC context dialer (Dialer); its listeners are
// wrapped with Listener. Sockets stay real loopback TCP: only dialing and
// the net.Conn wrappers change.
//
// Rules (Partition, Isolate, Delay) apply to new dials and to live
// connections alike. A dial to an unreachable node waits until the rules
// allow it or its deadline passes, as a dropped SYN would. A live
// connection across a cut is blackholed by default: reads and writes block
// (honouring deadlines) and resume on Heal without losing bytes, as TCP
// does across a partition that heals before its timeouts. With
// Config.CloseOnCut it is closed instead. DropConns closes a node's
// connections at once, like a crashed process.
//
// What it does not do: UDP (memberlist gossip is not routed through it),
// packet loss or reordering inside a stream (TCP never shows those to an
// application), or bandwidth limits.
//
// Who calls it: package clustertest builds one Network per test cluster and
// wires it into node.Config.Raft.StreamLayer and node.Config.GRPCDialer.
package faultnet
