// Package router implements MAP's map/send (map-protocol.md §5.4): it decodes
// the send params, resolves every Address form against the replicated agent
// registry (registry.Reader), builds the MAP Message once and hands it to each
// recipient: a `map/message` notification on the recipient's connection when
// the recipient is attached to this node, Peers.Submit when it is homed on
// another node. A service id registered with RegisterService (such as
// "concord.runs", agents' replies to run tasks) is one more recipient kind:
// the send is handed whole to that in-process LocalService, on the node that
// received it. Every map/send takes this one path, so params are validated
// and addresses parsed in one place. Agents and scopes of other systems
// ("dc2:agent:bob", {system, agent}, "dc2:scope:s", {system, scope}) are the
// last kind: the send is handed whole to Federation (federation.go), which
// answers delivered after the remote system's ack, queued while the link is
// down, or a 2001/5000/5001/5003/5010/5011 error; DeliverAgent is its way
// back in for messages from other systems, DeliverService for sends
// from other systems to a local service (an agent of dc2 answering a task
// of a debate homed here: the service sees Sender.SourceSystem), and
// DeliverSession for messages to a foreign system whose SDK gateway is
// connected here. The federated forms naming this system reach local
// agents and services.
//
// What it does not do: it stores nothing (map/send is ephemeral transport:
// no inbox, no retry, no read state) and it never proposes Raft commands.
//
// Who calls it: node/mapsvc delegates a connection's map/send to
// Router.HandleSend on the connection's request goroutine (a send to another
// node defers its reply until that node acknowledged, rpc.Defer, so the
// connection serves its next request meanwhile); in-process senders call
// Router.Send, which waits. The cluster layer calls DeliverLocal for
// messages relayed from other nodes. The router reports message_sent,
// message_delivered and message_failed to an EventSink (*fanout.Hub) and
// skips building them when the sink has no subscriber.
//
// Delivery results are honest: `delivered` lists only recipients whose
// connection accepted the message (or whose home node acknowledged handing
// it to the recipient's connection);
// a recipient that is orphaned, not connected, on a node without Peers, or
// whose send queue is full (rpc.ErrSlowConsumer) is reported as failed, and a
// send in which every recipient failed returns DELIVERY_FAILED (2003).
//
// Ordering: sends start in order per connection (only their replies may be
// deferred) and local delivery
// enqueues on the recipient's connection synchronously, so messages from one
// sender to one recipient keep their order (on a single node; across nodes
// Peers must keep per-stream order).
//
// Hot path: the payload and meta are never re-marshalled. The Message JSON is
// assembled once from the raw params (meta gets meta.timestamp spliced in if
// the sender did not set one, leaving every other byte unchanged) and the
// same bytes are used for every recipient.
package router
