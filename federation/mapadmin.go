package federation

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// CreateMapLink stores a link of kind map to the foreign MAP server at
// req.Url, known here as system req.SystemId. The leader then chooses the
// node that holds its connection.
func (m *Manager) CreateMapLink(ctx context.Context, req *concordv1.CreateMapLinkRequest) (*concordv1.FedLink, error) {
	switch {
	case !validSystemID(req.GetSystemId()):
		return nil, fmt.Errorf("%w: system id %q", ErrInvalidCommand, req.GetSystemId())
	case req.GetSystemId() == m.cfg.SystemID:
		return nil, ErrSelfLink
	}
	if l, ok := m.deps.State.Link(req.GetSystemId()); ok && !isMapLink(l) {
		return nil, fmt.Errorf("%w: %s is linked as a Concord system (unlink first)", ErrInvalidCommand, req.GetSystemId())
	}
	buf, err := BufferPolicyOr(req.GetBuffer())
	if err != nil {
		return nil, err
	}
	link := &concordv1.FedLink{
		PeerSystemId: req.GetSystemId(), Kind: concordv1.FedLinkKind_FED_LINK_KIND_MAP,
		Map:    &concordv1.FedMapLink{Url: req.GetUrl(), Auth: req.GetAuth(), CaPem: req.GetCaPem()},
		Export: orNone(req.GetExport()), Import: orAll(req.GetImport()), MaxHops: req.GetMaxHops(),
		Buffer: buf, CreatedAtMs: m.now().UnixMilli(), Initiator: true,
	}
	if link.MaxHops == 0 {
		link.MaxHops = DefaultMaxHops
	}
	if link.Map.GetAuth().GetMethod() == "" && link.Map.GetAuth().GetToken() == "" {
		link.Map.Auth = nil
	}
	if err := validMapLink(link); err != nil {
		return nil, err
	}
	if _, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_MAP_LINK_PUT, &concordv1.FedMapLinkPut{Link: link}); err != nil {
		return nil, fmt.Errorf("store map link to %s: %w", link.GetPeerSystemId(), err)
	}
	m.log.Info("map link made", "peer", link.GetPeerSystemId(), "url", RedactURL(link.GetMap().GetUrl()))
	return Redacted(link), nil
}

// assignHolders (leader only) gives every map link without a live holder
// one: the live server with the highest rendezvous hash of (link, node),
// so the choice is deterministic and spreads links over nodes. A live
// holder keeps its link (no move when a node rejoins).
func (m *Manager) assignHolders(ctx context.Context) {
	if !m.deps.IsLeader() || m.deps.Nodes == nil {
		return
	}
	nodes := m.deps.Nodes()
	alive := map[string]bool{}
	for _, n := range nodes {
		alive[n] = true
	}
	for _, l := range m.deps.State.Links() {
		if !isMapLink(l) || alive[l.GetMap().GetHolderNodeId()] || len(nodes) == 0 {
			continue
		}
		choice := pickHolder(l.GetPeerSystemId(), nodes)
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		_, _, err := m.deps.Store.Apply(cctx, concordv1.CommandType_COMMAND_TYPE_FED_MAP_HOLDER, &concordv1.FedMapHolder{
			PeerSystemId: l.GetPeerSystemId(), NodeId: choice, PrevEpoch: l.GetMap().GetHolderEpoch()})
		cancel()
		if err != nil {
			m.log.Debug("choose a map link holder", "peer", l.GetPeerSystemId(), "err", err)
			continue
		}
		m.log.Info("map link holder chosen", "peer", l.GetPeerSystemId(), "holder", choice, "previous", l.GetMap().GetHolderNodeId())
	}
}

// pickHolder is the rendezvous choice among nodes for link peer.
func pickHolder(peer string, nodes []string) string {
	var best string
	var bestH uint64
	for _, n := range nodes {
		h := fnv.New64a()
		_, _ = h.Write([]byte(peer + "\x00" + n))
		if v := h.Sum64(); best == "" || v > bestH || (v == bestH && n < best) {
			best, bestH = n, v
		}
	}
	return best
}

// MapForward accepts messages another node of this system forwards to
// the map link this node holds.
func (s *service) MapForward(ctx context.Context, req *concordv1.MapForwardRequest) (*concordv1.MapForwardResponse, error) {
	s.m.mu.Lock()
	ml := s.m.maps[req.GetPeerSystemId()]
	s.m.mu.Unlock()
	if ml == nil {
		return nil, status.Errorf(codes.NotFound, "federation: no map link to %s on this node", req.GetPeerSystemId())
	}
	if len(req.GetEnvelopes()) > maxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "federation: at most %d envelopes per forward", maxBatch)
	}
	acks, err := ml.acceptForward(ctx, req.GetEnvelopes())
	if errors.Is(err, errNotHolder) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.DeadlineExceeded, err.Error())
	}
	return &concordv1.MapForwardResponse{Acks: acks}, nil
}

// CreateMapLink is the admin method behind `concord federation link --kind map`.
func (s *service) CreateMapLink(ctx context.Context, req *concordv1.CreateMapLinkRequest) (*concordv1.CreateLinkResponse, error) {
	l, err := s.m.CreateMapLink(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &concordv1.CreateLinkResponse{Link: l}, nil
}

// sendMap hands msg to the map link to its system: the recipient must be
// a foreign agent in the imported directory (2001 otherwise); scopes of a
// foreign MAP server are not addressable (5003).
func (m *Manager) sendMap(ml *mapLink, msg Message, done func(Outcome)) {
	switch {
	case msg.ToScope != "":
		done(Outcome{Err: codeErr(CodeNotExported, "Scopes of MAP system "+ml.peer+" are not addressable over its link", map[string]any{"systemId": ml.peer})})
		return
	case msg.ToAgent == "":
		done(Outcome{Err: codeErr(CodeInvalidParams, "a federated address needs an agent", nil)})
		return
	}
	if _, ok := m.deps.State.RemoteAgent(ml.peer, msg.ToAgent); !ok {
		done(Outcome{Err: codeErr(CodeAgentNotFound, "Agent not found: "+RemoteID(ml.peer, msg.ToAgent)+" (not in the directory of MAP system "+ml.peer+")",
			map[string]any{"agentId": RemoteID(ml.peer, msg.ToAgent)})})
		return
	}
	ml.enqueue(m.originate(msg, maxHopsOf(ml.policy())), done)
}
