package membership

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

type lifecycle int

const (
	stateNew lifecycle = iota
	stateStarted
	stateShut
)

// Membership is one node's view of its system's LAN gossip membership. Create
// it with New, run it with Start, stop it with Leave (optional, graceful)
// and Shutdown. All methods are safe for concurrent use.
//
// Lock order: lifeMu, then memberlist's internal locks, then mu, then a
// Subscription's mu. memberlist calls the delegates (which take mu) while
// holding its node lock, so nothing may call into memberlist with mu held.
type Membership struct {
	cfg          Config
	log          *slog.Logger
	mlLog        *log.Logger
	mlLogMuted   atomic.Bool // set when Shutdown returns; see newMemberlistLogger
	leaving      atomic.Bool // advertised; set once by Leave
	bootstrapped atomic.Bool // advertised; set once by SetBootstrapped
	draining     atomic.Bool // advertised; set once by SetDraining
	joined       chan struct{}
	joinOnce     sync.Once
	stop         chan struct{} // closed by Shutdown; stops the join loop
	wg           sync.WaitGroup

	// lifeMu serializes Start, Leave, SetBootstrapped and Shutdown; it is
	// held while calling into memberlist and never taken by a callback.
	lifeMu sync.Mutex
	ml     *memberlist.Memberlist // set by Start; used under lifeMu
	trans  *cutTransport          // ml's transport (transport.go); set by Start

	mu      sync.Mutex
	state   lifecycle
	members map[string]memberEntry
	subs    map[*Subscription]struct{}
	ignored map[string]time.Time // peer name -> last "ignoring peer" log

	// keyring is memberlist's live keyring (nil for plaintext gossip); it
	// is safe for concurrent use. keyMu serializes changes with their
	// persisting (keyring.go).
	keyring *memberlist.Keyring
	keyMu   sync.Mutex

	// bootID is random per New: advertised so peers see a restart.
	bootID string

	// fatal is closed when the join loop gives up for good; fatalErr says
	// why (ErrGossipKey). See Fatal.
	fatal    chan struct{}
	fatalErr error
}

// memberEntry is a member plus when its status last changed, for reaping.
type memberEntry struct {
	member Member
	since  time.Time
}

// New validates cfg and returns a Membership that is not yet gossiping.
func New(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.JoinAddrs = slices.Clone(cfg.JoinAddrs)
	cfg.GossipKey = slices.Clone(cfg.GossipKey)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Membership{
		cfg:     cfg,
		log:     logger.With("component", "membership", "node_id", cfg.NodeID),
		joined:  make(chan struct{}),
		stop:    make(chan struct{}),
		members: make(map[string]memberEntry),
		subs:    make(map[*Subscription]struct{}),
		ignored: make(map[string]time.Time),
	}
	m.fatal = make(chan struct{})
	m.bootID = newBootID()
	m.mlLog = newMemberlistLogger(logger.With("component", "memberlist", "node_id", cfg.NodeID), &m.mlLogMuted)
	keys, err := m.initialKeys()
	if err != nil {
		return nil, err
	}
	if len(keys) > 0 {
		if m.keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return nil, fmt.Errorf("%w: gossip keyring: %w", ErrInvalidConfig, err)
		}
	}
	return m, nil
}

// Start binds the gossip listeners and, when JoinAddrs is set, starts a
// background goroutine that joins them, retrying with exponential backoff
// until one join reaches another member, ctx ends, or Shutdown. ctx bounds
// only that join loop (not the gossip, which runs until Shutdown). Start
// returns as soon as the listeners are up; Joined tells when the join
// succeeded.
func (m *Membership) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	switch st {
	case stateStarted:
		return ErrAlreadyStarted
	case stateShut:
		return ErrShutdown
	}
	mc := m.memberlistConfig()
	trans, err := newCutTransport(mc)
	if err != nil {
		return err
	}
	mc.Transport = trans
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = trans.Shutdown()
		return fmt.Errorf("create memberlist: %w", err)
	}
	m.ml, m.trans = ml, trans
	m.mu.Lock()
	m.state = stateStarted
	m.mu.Unlock()
	m.log.Info("gossip started", "addr", ml.LocalNode().Address(), "encrypted", m.keyring != nil)

	if len(m.cfg.JoinAddrs) == 0 {
		m.markJoined()
		return nil
	}
	src := m.cfg.JitterSource
	if src == nil {
		src = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	m.wg.Add(1)
	go m.joinLoop(ctx, ml, rand.New(src))
	return nil
}

// memberlistConfig maps Config onto memberlist's LAN defaults.
func (m *Membership) memberlistConfig() *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = m.cfg.NodeID
	mc.BindAddr = m.cfg.BindAddr
	mc.BindPort = m.cfg.BindPort
	mc.AdvertiseAddr = m.cfg.AdvertiseAddr
	// memberlist would advertise port 0 when only AdvertiseAddr is set;
	// with BindPort 0 it replaces both by the port it bound.
	mc.AdvertisePort = m.cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = m.cfg.BindPort
	}
	mc.Keyring = m.keyring
	m.cfg.Timings.apply(mc)
	d := delegate{m: m}
	mc.Delegate = d
	mc.Events = d
	mc.Alive = d
	mc.Merge = d
	mc.Conflict = d
	mc.Logger = m.mlLog
	mc.LogOutput = nil
	return mc
}

// Joined is closed once this node has joined at least one other member (or
// at Start when JoinAddrs is empty: there is nothing to join). It stays open
// if the join loop is abandoned (Start context ended, Shutdown).
func (m *Membership) Joined() <-chan struct{} { return m.joined }

func (m *Membership) markJoined() { m.joinOnce.Do(func() { close(m.joined) }) }

// Members returns every known member of this system, the local node
// included, sorted by id: alive ones, and those that left or died within
// DeadMemberRetention. Members of other systems never appear.
func (m *Membership) Members() []Member {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reapLocked(now)
	out := make([]Member, 0, len(m.members))
	for _, e := range m.members {
		out = append(out, e.member)
	}
	slices.SortFunc(out, compareMembers)
	return out
}

// LocalMember returns the local node as peers see it. Before Start its
// GossipAddr is empty; after Start it holds the bound address (useful with
// BindPort 0).
func (m *Membership) LocalMember() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.members[m.cfg.NodeID]; ok {
		return e.member
	}
	return Member{
		ID:              m.cfg.NodeID,
		SystemID:        m.cfg.SystemID,
		NodeMeta:        m.cfg.Meta,
		BootstrapExpect: m.cfg.BootstrapExpect,
		Bootstrapped:    m.bootstrapped.Load(),
		BootID:          m.bootID,
		Status:          StatusAlive,
	}
}

// reapLocked forgets members that left or died more than
// DeadMemberRetention ago. Called with mu held.
func (m *Membership) reapLocked(now time.Time) {
	for id, e := range m.members {
		if e.member.Status != StatusAlive && now.Sub(e.since) > m.cfg.DeadMemberRetention {
			delete(m.members, id)
		}
	}
}

// Leave announces a graceful departure: it first re-advertises the local
// meta with a "leaving" flag (so peers record the departure as left, not
// dead), then broadcasts memberlist's leave message, and waits until both
// went out or the deadline passes. The deadline is ctx's, capped at
// LeaveTimeout. Gossip keeps running until Shutdown, which should follow.
// A second Leave returns ErrLeft.
func (m *Membership) Leave(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	st := m.state
	m.mu.Unlock()
	switch {
	case st == stateNew:
		return ErrNotStarted
	case st == stateShut:
		return ErrShutdown
	case m.leaving.Swap(true):
		return ErrLeft
	}
	timeout := m.cfg.LeaveTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	done := make(chan error, 1)
	ml := m.ml
	// memberlist's Leave takes no context, so it runs in a goroutine owned by
	// m (Shutdown waits for it, which is bounded by timeout) and Leave
	// returns early if ctx is cancelled.
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		done <- m.leave(ml, timeout)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Membership) leave(ml *memberlist.Memberlist, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	m.log.Info("leaving gossip", "timeout", timeout)
	if err := ml.UpdateNode(max(timeout, time.Millisecond)); err != nil {
		// Peers that miss the flag record the departure as a failure; the
		// leave message below still goes out.
		m.log.Warn("leaving flag not confirmed", "err", err)
	}
	// memberlist treats a zero timeout as "wait forever".
	if err := ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		return fmt.Errorf("broadcast leave: %w", err)
	}
	return nil
}

// Shutdown stops gossip without announcing a leave (peers will detect the
// node as dead; call Leave first for a graceful exit), stops the join loop,
// closes every subscription and waits for all goroutines it started. It is
// idempotent and may be called before Start. An in-flight join attempt
// ends at once (its TCP connections are cut, transport.go); an
// interrupted Leave is waited for up to LeaveTimeout.
//
// Every goroutine this package starts has ended when Shutdown returns.
// memberlist's own Shutdown stops its listeners and tickers but does not
// wait for a probe round in progress; that goroutine ends on its own within
// the (awareness-scaled) probe interval, sends nothing, and any event it
// still causes reaches no subscriber.
func (m *Membership) Shutdown() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	if m.state == stateShut {
		m.mu.Unlock()
		return nil
	}
	m.state = stateShut
	subs := m.subs
	m.subs = make(map[*Subscription]struct{})
	m.mu.Unlock()

	close(m.stop)
	// A join's exchange with a frozen seed would hold the wait below
	// TCPTimeout per seed: cut memberlist's TCP connections (transport.go).
	if m.trans != nil {
		m.trans.cutAll()
	}
	// Wait before shutting memberlist down: memberlist panics on a Leave
	// after Shutdown, and an interrupted Leave may still be running.
	m.wg.Wait()
	var err error
	if m.ml != nil {
		if err = m.ml.Shutdown(); err != nil {
			err = fmt.Errorf("shutdown memberlist: %w", err)
		}
	}
	for s := range subs {
		s.close()
	}
	m.log.Info("gossip stopped")
	m.mlLogMuted.Store(true)
	return err
}
