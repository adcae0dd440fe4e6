package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/concordmap/concord/node/membership"
)

// Directory is a cached view of the gossip members, read on the hot path:
// PeerStreams.Send asks it whether the recipient's node is alive and where it
// listens for every message, and an atomic pointer load plus a map lookup
// is all that costs. It implements AddrResolver and PeerLister.
//
// The view is rebuilt by Refresh, which Run calls on every membership
// change and every Config.ReconcileInterval. All methods are safe for
// concurrent use.
type Directory struct {
	self     string
	members  MemberLister
	interval time.Duration
	view     atomic.Pointer[dirView]
}

type dirView struct {
	byID  map[string]membership.Member
	peers []string // alive, self excluded, sorted
}

// NewDirectory returns a Directory over members, filled once.
func NewDirectory(cfg Config, members MemberLister) (*Directory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if members == nil {
		return nil, fmt.Errorf("%w: Directory needs a MemberLister", ErrInvalidConfig)
	}
	d := &Directory{self: cfg.NodeID, members: members, interval: cfg.ReconcileInterval}
	d.Refresh()
	return d, nil
}

// Refresh rebuilds the view from MemberLister.Members.
func (d *Directory) Refresh() {
	ms := d.members.Members()
	v := &dirView{byID: make(map[string]membership.Member, len(ms))}
	for _, m := range ms {
		v.byID[m.ID] = m
		if m.ID != d.self && m.Status == membership.StatusAlive {
			v.peers = append(v.peers, m.ID)
		}
	}
	slices.Sort(v.peers)
	d.view.Store(v)
}

// Run refreshes the view whenever changed receives (pass a
// membership.Subscription's Changed channel; Run never drains it, the
// pending events it keeps are bounded by the member count) and every
// Config.ReconcileInterval. It returns when ctx ends; a closed changed
// channel only stops the event-driven refreshes. The caller owns the
// goroutine.
func (d *Directory) Run(ctx context.Context, changed <-chan struct{}) error {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case _, ok := <-changed:
			if !ok {
				changed = nil
			}
		case <-t.C:
		}
		d.Refresh()
	}
}

// GRPCAddr implements AddrResolver: the gRPC address of an alive member.
func (d *Directory) GRPCAddr(nodeID string) (string, bool) {
	m, ok := d.view.Load().byID[nodeID]
	if !ok || m.Status != membership.StatusAlive || m.GRPCAddr == "" {
		return "", false
	}
	return m.GRPCAddr, true
}

// Alive reports whether nodeID is an alive member. It fits
// mapsvc.Config.NodeAlive.
func (d *Directory) Alive(nodeID string) bool {
	m, ok := d.view.Load().byID[nodeID]
	return ok && m.Status == membership.StatusAlive
}

// Peers implements PeerLister: alive members other than this node, sorted.
// The slice is shared; do not modify it.
func (d *Directory) Peers() []string { return d.view.Load().peers }
