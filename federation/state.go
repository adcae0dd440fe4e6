package federation

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// ModuleName is the state module's stable name in Raft snapshots.
const ModuleName = "federation"

// State is the replicated federation state: links, issued peering tokens
// and the directory imported from each peer. Apply is called from the FSM
// goroutine (through node's raftstore adapter); readers on other
// goroutines get copies under the read lock.
type State struct {
	mu       sync.RWMutex
	links    map[string]*concordv1.FedLink
	tokens   map[string]*concordv1.FedTokenRecord // by string(secret_hash)
	imported map[string]*concordv1.FedImported
	// Guaranteed delivery and reliable unlink (state_outbox.go).
	outbox  map[string]*concordv1.FedOutbox         // by peer
	inbox   map[string]*concordv1.FedInbox          // by source system
	pending map[string]*concordv1.FedPendingUnlink  // by peer
	staging map[string]*concordv1.FedDirectoryApply // chunked update being assembled, by peer
	// stagedBytes is the encoded size of each staging entry (derived:
	// recomputed on restore, so every replica bounds alike).
	stagedBytes map[string]int
	// onAck, when set, hears every applied outbox ack (after the lock is
	// released): how the node that took a guaranteed send learns its
	// outcome. It changes no state.
	onAck    func(peer string, acked []Acked)
	gateways map[string]*concordv1.FedGatewayBinding // by foreign system id
	// sessions reads MAP sessions' attach epochs for the gateway
	// binding's session_epoch checks (gateway_state.go); nil: unchecked.
	sessions SessionEpochs

	// changed is closed (and replaced) after every applied change, so the
	// link manager wakes without Apply waiting on it.
	changed chan struct{}
}

// NewState returns empty state.
func NewState() *State {
	return &State{
		links: map[string]*concordv1.FedLink{}, tokens: map[string]*concordv1.FedTokenRecord{},
		imported: map[string]*concordv1.FedImported{}, changed: make(chan struct{}),
		outbox: map[string]*concordv1.FedOutbox{}, inbox: map[string]*concordv1.FedInbox{},
		pending: map[string]*concordv1.FedPendingUnlink{}, staging: map[string]*concordv1.FedDirectoryApply{},
		stagedBytes: map[string]int{}, gateways: map[string]*concordv1.FedGatewayBinding{},
	}
}

// SessionEpochs reads the attach epoch of a MAP session (false: no such
// session); node's *registry.State implements it (SessionEpoch). Apply
// reads it on the FSM goroutine, which applies the registry's entries
// too, so every replica sees the session at the same point of the log.
type SessionEpochs interface {
	SessionEpoch(sessionID string) (uint64, bool)
}

// WithSessions makes the gateway bind and unbind commands that quote a
// session_epoch apply only while their session is where the proposer saw
// it (gateway_state.go). Set it before the state is registered with the
// store, on every replica: without it the quote is not checked.
func (s *State) WithSessions(sessions SessionEpochs) *State {
	s.sessions = sessions
	return s
}

// Commands lists the command types State applies, each with an empty
// body of its type.
func (s *State) Commands() map[concordv1.CommandType]func() proto.Message {
	return map[concordv1.CommandType]func() proto.Message{
		concordv1.CommandType_COMMAND_TYPE_FED_TOKEN_CREATE:    func() proto.Message { return &concordv1.FedTokenCreate{} },
		concordv1.CommandType_COMMAND_TYPE_FED_LINK_PUT:        func() proto.Message { return &concordv1.FedLinkPut{} },
		concordv1.CommandType_COMMAND_TYPE_FED_LINK_REMOVE:     func() proto.Message { return &concordv1.FedLinkRemove{} },
		concordv1.CommandType_COMMAND_TYPE_FED_LINK_ADDRS:      func() proto.Message { return &concordv1.FedLinkAddrs{} },
		concordv1.CommandType_COMMAND_TYPE_FED_DIRECTORY_APPLY: func() proto.Message { return &concordv1.FedDirectoryApply{} },
		concordv1.CommandType_COMMAND_TYPE_FED_MAP_LINK_PUT:    func() proto.Message { return &concordv1.FedMapLinkPut{} },
		concordv1.CommandType_COMMAND_TYPE_FED_MAP_HOLDER:      func() proto.Message { return &concordv1.FedMapHolder{} },
		concordv1.CommandType_COMMAND_TYPE_FED_MAP_DIRECTORY:   func() proto.Message { return &concordv1.FedMapDirectory{} },
		concordv1.CommandType_COMMAND_TYPE_FED_OUTBOX_PUT:      func() proto.Message { return &concordv1.FedOutboxPut{} },
		concordv1.CommandType_COMMAND_TYPE_FED_OUTBOX_ACK:      func() proto.Message { return &concordv1.FedOutboxAck{} },
		concordv1.CommandType_COMMAND_TYPE_FED_INBOX_MARK:      func() proto.Message { return &concordv1.FedInboxMark{} },
		concordv1.CommandType_COMMAND_TYPE_FED_UNLINK_DONE:     func() proto.Message { return &concordv1.FedUnlinkDone{} },
		concordv1.CommandType_COMMAND_TYPE_FED_DIRECTORY_CHUNK: func() proto.Message { return &concordv1.FedDirectoryChunk{} },
		concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_BIND:    func() proto.Message { return &concordv1.FedGatewayBind{} },
		concordv1.CommandType_COMMAND_TYPE_FED_GATEWAY_UNBIND:  func() proto.Message { return &concordv1.FedGatewayUnbind{} },
	}
}

// Apply applies one decoded command. It is deterministic; a domain error
// leaves the state unchanged and is returned as a value.
func (s *State) Apply(index uint64, msg proto.Message) (any, error) {
	s.mu.Lock()
	var (
		err    error
		result any
		acked  func()
	)
	switch m := msg.(type) {
	case *concordv1.FedTokenCreate:
		err = s.applyTokenCreate(m)
	case *concordv1.FedLinkPut:
		err = s.applyLinkPut(index, m)
	case *concordv1.FedLinkRemove:
		err = s.applyLinkRemove(m)
	case *concordv1.FedLinkAddrs:
		err = s.applyLinkAddrs(m)
	case *concordv1.FedDirectoryApply:
		err = s.applyDirectory(m)
	case *concordv1.FedMapLinkPut:
		err = s.applyMapLinkPut(m)
	case *concordv1.FedMapHolder:
		err = s.applyMapHolder(m)
	case *concordv1.FedMapDirectory:
		err = s.applyMapDirectory(index, m)
	case *concordv1.FedOutboxPut:
		result, err = s.applyOutboxPut(m)
	case *concordv1.FedOutboxAck:
		if out, hook := s.applyOutboxAck(m), s.onAck; len(out) > 0 && hook != nil {
			acked = func() { hook(m.GetPeerSystemId(), out) }
		}
	case *concordv1.FedInboxMark:
		err = s.applyInboxMark(m)
	case *concordv1.FedUnlinkDone:
		err = s.applyUnlinkDone(m)
	case *concordv1.FedDirectoryChunk:
		err = s.applyDirectoryChunk(m.GetUpdate())
	case *concordv1.FedGatewayBind:
		err = s.applyGatewayBind(m)
	case *concordv1.FedGatewayUnbind:
		err = s.applyGatewayUnbind(m)
	default:
		err = fmt.Errorf("%w: unexpected body %T", ErrInvalidCommand, msg)
	}
	var wake chan struct{}
	if err == nil {
		wake, s.changed = s.changed, make(chan struct{})
	}
	s.mu.Unlock()
	if wake != nil {
		close(wake)
	}
	if acked != nil {
		acked()
	}
	return result, err
}

func (s *State) applyTokenCreate(m *concordv1.FedTokenCreate) error {
	t := m.GetToken()
	if t.GetPeerSystemId() == "" || len(t.GetSecretHash()) == 0 || t.GetExpiresAtMs() <= m.GetCreatedAtMs() {
		return fmt.Errorf("%w: token needs a peer, a secret hash and an expiry after its creation", ErrInvalidCommand)
	}
	for k, old := range s.tokens { // deterministic: deletes only, whatever the order
		if old.GetExpiresAtMs() <= m.GetCreatedAtMs() {
			delete(s.tokens, k)
		}
	}
	s.tokens[string(t.GetSecretHash())] = proto.CloneOf(t)
	return nil
}

func (s *State) applyLinkPut(index uint64, m *concordv1.FedLinkPut) error {
	l := m.GetLink()
	if err := validLink(l); err != nil {
		return err
	}
	if old, ok := s.links[l.GetPeerSystemId()]; ok && isMapLink(old) {
		return fmt.Errorf("%w: %s is linked as a MAP server (unlink first)", ErrInvalidCommand, l.GetPeerSystemId())
	}
	if h := m.GetRedeemSecretHash(); len(h) > 0 {
		t, ok := s.tokens[string(h)]
		switch {
		case !ok:
			return ErrTokenUnknown
		case t.GetUsed():
			return ErrTokenUsed
		case t.GetExpiresAtMs() <= m.GetNowMs():
			return ErrTokenExpired
		case t.GetPeerSystemId() != l.GetPeerSystemId():
			return fmt.Errorf("%w: issued for %q, redeemed by %q", ErrTokenPeer, t.GetPeerSystemId(), l.GetPeerSystemId())
		}
		t.Used = true
		l = proto.CloneOf(l)
		// The issuer chose the policies when it issued the token.
		l.Export, l.Import, l.Transitive = t.GetExport(), t.GetImport(), t.GetTransitive()
		if t.GetBuffer() != nil {
			l.Buffer = t.GetBuffer()
		}
		if t.GetMaxHops() > 0 {
			l.MaxHops = t.GetMaxHops()
		}
		if t.GetOutbox() != nil {
			l.Outbox = t.GetOutbox()
		}
		s.putLink(index, l)
		return nil
	}
	s.putLink(index, proto.CloneOf(l))
	return nil
}

// putLink stores a new link (l is the state's own copy) as of the Raft
// entry at index, its epoch. Guaranteed-delivery numbering starts afresh
// on both sides of a new link, and a pending unlink of an older link to
// the same peer must not remove this one. Every FED_LINK_PUT (re)creates
// a link; updates of a stored link (FED_LINK_ADDRS) keep its epoch.
func (s *State) putLink(index uint64, l *concordv1.FedLink) {
	p := l.GetPeerSystemId()
	l.Epoch = index
	s.links[p] = l
	delete(s.outbox, p)
	delete(s.inbox, p)
	delete(s.pending, p)
	s.dropStaging(p)
}

func validLink(l *concordv1.FedLink) error {
	if l.GetPeerSystemId() == "" || !validSystemID(l.GetPeerSystemId()) {
		return fmt.Errorf("%w: link needs a valid peer system id", ErrInvalidCommand)
	}
	if l.GetKind() != concordv1.FedLinkKind_FED_LINK_KIND_CONCORD || l.GetMap() != nil {
		return fmt.Errorf("%w: a link of kind map is stored by FED_MAP_LINK_PUT", ErrInvalidCommand)
	}
	if len(l.GetPeerAddrs()) == 0 {
		return fmt.Errorf("%w: link to %s has no peer address", ErrInvalidCommand, l.GetPeerSystemId())
	}
	return nil
}

func (s *State) applyLinkRemove(m *concordv1.FedLinkRemove) error {
	if _, ok := s.links[m.GetPeerSystemId()]; !ok {
		return fmt.Errorf("%w: %s", ErrNoLink, m.GetPeerSystemId())
	}
	p := m.GetPeerSystemId()
	if m.GetNotifyPeer() {
		s.pending[p] = &concordv1.FedPendingUnlink{Link: s.links[p], RemovedAtMs: m.GetNowMs()}
	}
	delete(s.links, p)
	delete(s.imported, p)
	delete(s.outbox, p)
	delete(s.inbox, p)
	s.dropStaging(p)
	return nil
}

func (s *State) applyLinkAddrs(m *concordv1.FedLinkAddrs) error {
	l, ok := s.links[m.GetPeerSystemId()]
	if !ok || isMapLink(l) {
		return fmt.Errorf("%w: %s", ErrNoLink, m.GetPeerSystemId())
	}
	if len(m.GetAddrs()) == 0 {
		return fmt.Errorf("%w: empty address list", ErrInvalidCommand)
	}
	l.PeerAddrs = slices.Clone(m.GetAddrs())
	return nil
}

func (s *State) applyDirectory(m *concordv1.FedDirectoryApply) error {
	peer := m.GetPeerSystemId()
	l, ok := s.links[peer]
	if !ok || isMapLink(l) {
		return fmt.Errorf("%w: %s", ErrNoLink, peer)
	}
	cur := s.imported[peer]
	if cur != nil && m.GetVersion() <= cur.GetVersion() {
		return nil // stale or duplicate: already have it
	}
	next := &concordv1.FedImported{PeerSystemId: peer, Version: m.GetVersion(), Digest: m.GetDigest()}
	byID := map[string]*concordv1.FedRemoteAgent{}
	if !m.GetFull() {
		if cur.GetVersion() != m.GetBaseVersion() {
			return fmt.Errorf("%w: have %d, delta from %d", ErrDirectoryGap, cur.GetVersion(), m.GetBaseVersion())
		}
		for _, a := range cur.GetAgents() {
			byID[a.GetId()] = a
		}
	}
	for _, id := range m.GetRemoves() {
		delete(byID, id)
	}
	for _, a := range m.GetUpserts() {
		if a.GetId() == "" {
			return fmt.Errorf("%w: remote agent without id", ErrInvalidCommand)
		}
		if Matches(l.GetImport(), agentView(a)) {
			byID[a.GetId()] = proto.CloneOf(a)
		} else {
			delete(byID, a.GetId())
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		next.Agents = append(next.Agents, byID[id])
	}
	s.imported[peer] = next
	return nil
}

// Changed returns a channel closed at the next applied change.
func (s *State) Changed() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.changed
}

// Link returns a copy of the link to peer.
func (s *State) Link(peer string) (*concordv1.FedLink, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.links[peer]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(l), true
}

// LinkPolicies returns the link to peer reduced to what a stream reads
// per batch of envelopes: peer, epoch, kind, export and import policies,
// transitive, max hops, outage buffer and outbox policies. Unlike Link it
// makes no deep copy (Link's costs 2-6 µs on a 2-core machine, the CA
// certificate included, and an idle link paid it per message; this one
// ~0.2 µs, BenchmarkState_LinkPolicies): the policy messages are shared
// with the state, which never changes them in place (a link update stores
// new ones), so the caller must only read them.
func (s *State) LinkPolicies(peer string) (*concordv1.FedLink, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.links[peer]
	if !ok {
		return nil, false
	}
	return &concordv1.FedLink{PeerSystemId: l.GetPeerSystemId(), Epoch: l.GetEpoch(), Kind: l.GetKind(),
		Export: l.GetExport(), Import: l.GetImport(), Transitive: l.GetTransitive(), MaxHops: l.GetMaxHops(),
		Buffer: l.GetBuffer(), Outbox: l.GetOutbox()}, true
}

// LinkEpoch returns the epoch of the link to peer (ok false: no link),
// without Link's copy.
func (s *State) LinkEpoch(peer string) (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.links[peer]
	return l.GetEpoch(), ok
}

// HasLink reports whether a link to peer exists, without Link's copy (a
// per-message check on the send path).
func (s *State) HasLink(peer string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.links[peer]
	return ok
}

// OutboxGuaranteed reports whether the link to peer sends every message
// guaranteed (FedOutboxPolicy.guaranteed), without Link's copy.
func (s *State) OutboxGuaranteed(peer string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.links[peer].GetOutbox().GetGuaranteed()
}

// Links returns copies of every link, sorted by peer system id.
func (s *State) Links() []*concordv1.FedLink {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*concordv1.FedLink, 0, len(s.links))
	for _, l := range s.links {
		out = append(out, proto.CloneOf(l))
	}
	slices.SortFunc(out, func(a, b *concordv1.FedLink) int {
		return cmpString(a.GetPeerSystemId(), b.GetPeerSystemId())
	})
	return out
}

// Imported returns a copy of the directory imported from peer.
func (s *State) Imported(peer string) *concordv1.FedImported {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if im, ok := s.imported[peer]; ok {
		return proto.CloneOf(im)
	}
	return &concordv1.FedImported{PeerSystemId: peer}
}

// ImportedVersion returns the version and digest of the directory
// imported from peer (zero when none), without copying it.
func (s *State) ImportedVersion(peer string) (uint64, []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	im := s.imported[peer]
	return im.GetVersion(), bytes.Clone(im.GetDigest())
}

// RemoteAgent looks an agent up in the directory imported from peer.
func (s *State) RemoteAgent(peer, id string) (*concordv1.FedRemoteAgent, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	im := s.imported[peer]
	i, ok := slices.BinarySearchFunc(im.GetAgents(), id, func(a *concordv1.FedRemoteAgent, id string) int {
		return cmpString(a.GetId(), id)
	})
	if !ok {
		return nil, false
	}
	return proto.CloneOf(im.GetAgents()[i]), true
}

// RemoteHome is the home server address the peer exported for one of
// its agents ("" when unknown), without RemoteAgent's copy (a per-message
// look-up on the send path).
func (s *State) RemoteHome(peer, id string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	agents := s.imported[peer].GetAgents()
	i, ok := slices.BinarySearchFunc(agents, id, func(a *concordv1.FedRemoteAgent, id string) int {
		return cmpString(a.GetId(), id)
	})
	if !ok {
		return ""
	}
	return agents[i].GetHomeAddr()
}

// TokenByHash returns a copy of an issued token (for tests and status).
func (s *State) TokenByHash(hash []byte) (*concordv1.FedTokenRecord, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tokens[string(hash)]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(t), true
}

func cmpString(a, b string) int { return strings.Compare(a, b) }
