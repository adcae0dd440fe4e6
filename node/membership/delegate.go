package membership

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

const (
	// ignoredLogInterval rate-limits the "ignoring peer" log per peer name:
	// a misconfigured or garbage peer keeps gossiping and must not flood logs.
	ignoredLogInterval = time.Minute
	// maxIgnoredNames bounds the rate-limit table (peer names come from the
	// network); it is simply cleared when full.
	maxIgnoredNames = 1024
	maxLoggedName   = 128
)

// delegate implements memberlist's Delegate, EventDelegate, AliveDelegate,
// MergeDelegate and ConflictDelegate. memberlist calls the event and alive
// hooks with its node lock held: they only decode, take m.mu briefly and
// publish without blocking.
type delegate struct{ m *Membership }

// NodeMeta returns the local node's encoded meta. memberlist asks only at
// Start and on UpdateNode, so it is encoded on demand. Validate checked
// that the largest encoding fits, because memberlist panics on oversize.
func (d delegate) NodeMeta(limit int) []byte {
	w := d.m.cfg.wireMeta()
	w.leaving = d.m.leaving.Load()
	w.bootstrapped = d.m.bootstrapped.Load()
	w.bootID = d.m.bootID
	w.draining = d.m.draining.Load()
	b := encodeMeta(w)
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg, GetBroadcasts, LocalState and MergeRemoteState carry user
// messages and state, which this package does not use.
func (delegate) NotifyMsg([]byte)                  {}
func (delegate) GetBroadcasts(int, int) [][]byte   { return nil }
func (delegate) LocalState(bool) []byte            { return nil }
func (delegate) MergeRemoteState([]byte, bool)     {}
func (d delegate) NotifyJoin(n *memberlist.Node)   { d.m.observe(n, false) }
func (d delegate) NotifyUpdate(n *memberlist.Node) { d.m.observe(n, false) }
func (d delegate) NotifyLeave(n *memberlist.Node)  { d.m.observe(n, true) }

// NotifyAlive filters every alive message (gossip, push/pull, our own)
// before memberlist stores it: a peer with undecodable meta, a name that
// differs from its meta's node id, or another system id is never tracked.
func (d delegate) NotifyAlive(n *memberlist.Node) error {
	_, err := d.m.admit(n)
	return err
}

// NotifyMerge refuses a push/pull (and so a join) with a peer whose view
// contains a node of another system: the two clusters stay apart instead of
// half-merging. Nodes with bad meta are left to NotifyAlive to drop.
func (d delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		w, err := decodeMeta(p.Meta)
		if err != nil || w.systemID == d.m.cfg.SystemID {
			continue
		}
		err = fmt.Errorf("%w: %q is in system %q", ErrForeignSystem, w.nodeID, w.systemID)
		d.m.logIgnored(p, err)
		return err
	}
	return nil
}

// NotifyConflict reports two nodes claiming one node id: an operator error
// (ids must be unique per system) that memberlist resolves by ignoring the
// newcomer.
func (d delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.m.log.Error("node id conflict", "peer", existing.Name,
		"addr", existing.Address(), "other_addr", other.Address())
}

// admit decodes and checks a peer's meta; on failure it logs (rate-limited)
// and returns the error that makes memberlist ignore the peer.
func (m *Membership) admit(n *memberlist.Node) (wireMeta, error) {
	w, err := decodeMeta(n.Meta)
	switch {
	case err != nil:
	case w.nodeID != n.Name:
		err = fmt.Errorf("%w: node id %q differs from gossip name", ErrInvalidMeta, w.nodeID)
	case w.systemID != m.cfg.SystemID:
		err = fmt.Errorf("%w: %q", ErrForeignSystem, w.systemID)
	}
	if err != nil {
		m.logIgnored(n, err)
		return wireMeta{}, err
	}
	return w, nil
}

func (m *Membership) logIgnored(n *memberlist.Node, err error) {
	name := n.Name
	if len(name) > maxLoggedName {
		name = name[:maxLoggedName]
	}
	now := time.Now()
	m.mu.Lock()
	last, seen := m.ignored[name]
	if seen && now.Sub(last) < ignoredLogInterval {
		m.mu.Unlock()
		return
	}
	if len(m.ignored) >= maxIgnoredNames {
		clear(m.ignored)
	}
	m.ignored[name] = now
	m.mu.Unlock()
	m.log.Warn("ignoring peer", "peer", name, "addr", n.Address(), "err", err)
}

// observe records a memberlist join/update (gone=false) or leave
// (gone=true) and publishes the resulting event. A departure counts as a
// graceful leave when the node's last meta carried the leaving flag.
func (m *Membership) observe(n *memberlist.Node, gone bool) {
	w, err := m.admit(n)
	if err != nil {
		return // memberlist only holds admitted nodes; defensive
	}
	mem := Member{
		ID:              w.nodeID,
		SystemID:        w.systemID,
		GossipAddr:      n.Address(),
		NodeMeta:        w.meta,
		BootstrapExpect: w.bootstrapExpect,
		Bootstrapped:    w.bootstrapped,
		BootID:          w.bootID,
		Draining:        w.draining,
		Status:          StatusAlive,
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stateShut {
		// memberlist's suspicion timers can fire after Shutdown; the
		// caller's logger and subscribers may be gone by then.
		return
	}
	prev, had := m.members[mem.ID]
	var kind EventKind
	switch {
	case gone && w.leaving:
		mem.Status, kind = StatusLeft, EventLeave
	case gone:
		mem.Status, kind = StatusDead, EventFail
	case !had || prev.member.Status != StatusAlive:
		kind = EventJoin
	case prev.member == mem:
		return // only the leaving flag changed; nothing a consumer sees
	default:
		kind = EventUpdate
	}
	m.members[mem.ID] = memberEntry{member: mem, since: now}
	m.reapLocked(now)
	if kind == EventJoin && mem.ID != m.cfg.NodeID {
		m.markJoined() // someone joined us, or we them: the join loop can stop
	}
	m.logEvent(kind, mem)
	ev := Event{Kind: kind, Member: mem}
	for s := range m.subs {
		s.publish(ev)
	}
}

func (m *Membership) logEvent(kind EventKind, mem Member) {
	attrs := []any{"peer", mem.ID, "addr", mem.GossipAddr, "version", mem.Version}
	switch kind {
	case EventJoin:
		m.log.Info("member joined", attrs...)
	case EventUpdate:
		m.log.Debug("member updated", attrs...)
	case EventLeave:
		m.log.Info("member left", attrs...)
	case EventFail:
		m.log.Warn("member failed", attrs...)
	}
}
