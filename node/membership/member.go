package membership

import "cmp"

// Status is a member's liveness as this node sees it.
//
// There is no "suspect" status: memberlist v0.7 keeps suspicion internal
// (Node.State is never filled in, hashicorp/memberlist#266), so a suspected
// member reads as alive until it is declared dead or refutes.
type Status int

const (
	// StatusAlive means the member answers probes (or is only suspected).
	StatusAlive Status = iota + 1
	// StatusLeft means the member announced a graceful leave.
	StatusLeft
	// StatusDead means the member stopped answering and the suspicion
	// timeout expired; it may come back (it is then alive again).
	StatusDead
)

// String returns "alive", "left" or "dead".
func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusLeft:
		return "left"
	case StatusDead:
		return "dead"
	default:
		return "unknown"
	}
}

// Member is one node of this system as seen by the local node. It is a
// snapshot value; later changes arrive as events and new snapshots.
type Member struct {
	// ID is the node id (memberlist name, Raft server id).
	ID string
	// SystemID is always the local node's system id: peers of other systems
	// are never members.
	SystemID string
	// GossipAddr is the member's memberlist address, host:port.
	GossipAddr string
	// NodeMeta holds the member's advertised addresses, version and role.
	NodeMeta
	// BootstrapExpect is the member's configured bootstrap-expect value.
	BootstrapExpect int
	// Bootstrapped reports that the member has Raft state (see
	// Membership.SetBootstrapped).
	Bootstrapped bool
	// Draining reports that an operator is draining the member (see
	// Membership.SetDraining).
	Draining bool
	// BootID changes every time the member's process starts (empty from
	// older nodes): a different BootID at the same address is a restart
	// that gossip may not have seen as a death.
	BootID string
	// Status is alive, left or dead.
	Status Status
}

func compareMembers(a, b Member) int { return cmp.Compare(a.ID, b.ID) }

// EventKind says what happened to a member.
type EventKind int

const (
	// EventJoin: a member became alive (first seen, or back from dead/left).
	EventJoin EventKind = iota + 1
	// EventUpdate: an alive member changed its advertised meta.
	EventUpdate
	// EventLeave: a member left gracefully (status left). The Raft
	// reconciler removes such a server at once.
	EventLeave
	// EventFail: a member was declared dead (status dead). The reconciler
	// removes such a server only after its cleanup delay.
	EventFail
)

// String returns "join", "update", "leave" or "fail".
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFail:
		return "fail"
	default:
		return "unknown"
	}
}

// Event is one change to one member, with the member as it was right after
// the change.
type Event struct {
	Kind   EventKind
	Member Member
}
