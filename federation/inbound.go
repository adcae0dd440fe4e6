package federation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Link serves a stream a node of a linked system opened to this node:
// hello must name a system this system has a link to (and, with TLS, the
// one its certificate names); then every envelope is checked, delivered
// to its local recipient and acknowledged with the outcome.
func (s *service) Link(stream concordv1.Federation_LinkServer) error {
	m := s.m
	f, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := f.GetHello()
	if hello == nil || !validSystemID(hello.GetSystemId()) {
		return status.Error(codes.InvalidArgument, "federation: a link stream starts with hello naming a system")
	}
	peer := hello.GetSystemId()
	link, ok := m.deps.State.Link(peer)
	if !ok || isMapLink(link) {
		return status.Errorf(codes.PermissionDenied, "federation: system %s has no link to system %s", m.cfg.SystemID, peer)
	}
	if err := m.checkIdentity(stream.Context(), peer, link.GetPeerCaPem()); err != nil {
		return err
	}
	if err := stream.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Welcome{Welcome: &concordv1.FedWelcome{
		SystemId: m.cfg.SystemID, NodeId: m.cfg.NodeID, Addrs: m.deps.Servers()}}}); err != nil {
		return err
	}
	direct := hello.GetDirect()
	if !direct { // status counts the peer's main streams
		m.inboundDelta(peer, 1)
		defer m.inboundDelta(peer, -1)
	}
	in := newInStream(m, peer, link.GetEpoch(), stream)
	in.direct = direct
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	in.end = cancel
	wdone := make(chan error, 1)
	go func() { wdone <- in.writer(ctx) }()
	mdone := make(chan struct{})
	go func() { defer close(mdone); in.marker(ctx) }()
	gdone := make(chan struct{})
	m.wg.Add(1) // it may start service calls, which join m.wg
	go func() { defer m.wg.Done(); defer close(gdone); in.sequencer(ctx) }()
	rdone := make(chan error, 1)
	m.wg.Add(1) // Recv returns once the handler has returned
	go func() { defer m.wg.Done(); rdone <- in.read(ctx) }()
	writerDone := false
	select {
	case err = <-rdone:
	case err = <-wdone:
		writerDone = true
	case <-m.closing:
		err = status.Error(codes.Unavailable, "federation: server shutting down")
	}
	cancel()
	if !writerDone {
		<-wdone
	}
	<-gdone // before the marker's end: a delivery it finishes is then marked by closeMarks or markLater
	<-mdone
	in.closeMarks()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// inStream is one inbound Link stream: a reader that delivers in arrival
// order and a writer that sends acks and directory updates.
type inStream struct {
	m      *Manager
	peer   string
	epoch  uint64 // of the link the stream opened on: its inbox marks name it
	stream concordv1.Federation_LinkServer
	direct bool // a direct stream (direct.go): counted apart
	// end ends the stream's handler (nil in tests without one).
	end context.CancelFunc

	mu     sync.Mutex
	outq   []*concordv1.FedFrame
	acks   []*concordv1.FedAck
	wake   chan struct{}
	sent   map[string]*concordv1.FedRemoteAgent // the directory last sent on this stream
	sentAt uint64                               // its version (0: none)
	// Guaranteed messages (guaranteed.go, guaranteed_order.go): those
	// waiting for the sequencer, whether this stream waited for the Raft
	// barrier yet, and the processed ones whose acks wait for their inbox
	// mark.
	gq        chan gjob
	gnext     []gjob           // taken from gq by hold, delivered before it (sequencer's own)
	held      map[uint64]int64 // seqs this node holds in the inbox, until when (ms; sequencer's own)
	barriered bool
	gmarks    []gmark
	markWake  chan struct{} // cap 1: gmarks grew
	closed    bool          // the stream ended: marks are made without acks
}

func newInStream(m *Manager, peer string, epoch uint64, stream concordv1.Federation_LinkServer) *inStream {
	return &inStream{m: m, peer: peer, epoch: epoch, stream: stream, wake: make(chan struct{}, 1), markWake: make(chan struct{}, 1),
		gq: make(chan gjob, gQueue), held: map[uint64]int64{}}
}

func (in *inStream) read(ctx context.Context) error {
	for {
		f, err := in.stream.Recv()
		if err != nil {
			return err
		}
		switch fr := f.GetFrame().(type) {
		case *concordv1.FedFrame_Batch:
			// The link's policies are read once per batch, not per
			// envelope, and without State.Link's deep copy.
			envs := fr.Batch.GetEnvelopes()
			in.m.countReceived(in.peer, len(envs), in.direct)
			link, ok := in.m.deps.State.LinkPolicies(in.peer)
			for _, env := range envs {
				in.deliver(ctx, env, link, ok)
			}
		case *concordv1.FedFrame_DirRequest:
			for _, u := range in.directory(fr.DirRequest.GetHaveVersion(), fr.DirRequest.GetHaveDigest()) {
				in.push(&concordv1.FedFrame{Frame: &concordv1.FedFrame_DirUpdate{DirUpdate: u}})
			}
		case *concordv1.FedFrame_Ping:
			in.push(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Pong{Pong: &concordv1.FedPing{
				SentUnixNano: fr.Ping.GetSentUnixNano(), Addrs: in.m.deps.Servers()}}})
		default:
			return status.Error(codes.InvalidArgument, "federation: unexpected frame on a link stream")
		}
	}
}

// deliver checks env and hands it to the local recipient; the ack
// follows the outcome. Calls are made in arrival order, which keeps the
// order per sender and recipient; guaranteed messages go to the stream's
// sequencer, which delivers them one at a time in seq order. link is the
// stream's link as read for env's batch (linked false: removed).
func (in *inStream) deliver(ctx context.Context, env *concordv1.FedEnvelope, link *concordv1.FedLink, linked bool) {
	m := in.m
	seq := env.GetSeq()
	if cerr := CheckInbound(env, m.cfg.SystemID, in.peer, m.cfg.MaxEnvelopeBytes); cerr != nil {
		in.ack(seq, cerr, nil)
		return
	}
	if env.GetGuaranteedSeq() > 0 {
		in.enqueueGuaranteed(gjob{env: env, link: link, linked: linked})
		return
	}
	in.dispatch(ctx, env, link, linked, in.ack)
}

// dispatch hands a checked envelope to its recipient; answer hears the
// outcome, once.
func (in *inStream) dispatch(ctx context.Context, env *concordv1.FedEnvelope, link *concordv1.FedLink, linked bool,
	answer func(seq uint64, cerr *CodeError, delivered []string)) {
	m, seq := in.m, env.GetSeq()
	if env.GetTargetSystem() != m.cfg.SystemID {
		m.forward(env, in.peer, func(o Outcome) { in.ackOutcome(seq, o) })
		return
	}
	if !linked {
		answer(seq, codeErr(CodeSystemNotFound, "Federation link to "+in.peer+" removed", nil), nil)
		return
	}
	if svc := m.deps.Services; svc != nil && env.GetToAgent() != "" && svc.IsService(env.GetToAgent()) {
		in.deliverService(ctx, svc, env, answer)
		return
	}
	targets, cerr := in.targets(link, env)
	if cerr != nil && m.deps.Barrier != nil && (cerr.Code == CodeAgentNotFound || env.GetToScope() != "") {
		bctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		if m.deps.Barrier(bctx) == nil {
			targets, cerr = in.targets(link, env)
		}
		cancel()
	}
	if cerr != nil {
		answer(seq, cerr, nil)
		return
	}
	m.deliverLocal(ctx, targets, BuildMessage(env), func(delivered []string, cerr *CodeError) { answer(seq, cerr, delivered) })
}

// deliverLocal hands msg to each local agent in targets; done hears the
// remote ids of those whose connection took it, or the last error when
// none did.
func (m *Manager) deliverLocal(ctx context.Context, targets []string, msg json.RawMessage, done func([]string, *CodeError)) {
	var (
		mu        sync.Mutex
		left      = len(targets)
		delivered []string
		lastErr   error
	)
	for _, id := range targets {
		m.deps.Deliver.DeliverAgent(ctx, id, msg, func(err error) {
			mu.Lock()
			if err == nil {
				delivered = append(delivered, RemoteID(m.cfg.SystemID, id))
			} else {
				lastErr = err
			}
			left--
			last := left == 0
			mu.Unlock()
			if !last {
				return
			}
			if len(delivered) == 0 {
				done(nil, deliveryError(lastErr))
			} else {
				done(delivered, nil)
			}
		})
	}
}

// deliverService hands env to the local service it names on a goroutine
// of its own (a service may take a Raft commit to answer; the stream
// keeps reading meanwhile) and answers with the service's outcome.
// The goroutine joins the manager's wait group, which the reader already
// holds, and its call is bounded by CallTimeout.
func (in *inStream) deliverService(ctx context.Context, svc ServiceDeliverer, env *concordv1.FedEnvelope,
	answer func(seq uint64, cerr *CodeError, delivered []string)) {
	m := in.m
	seq, id := env.GetSeq(), env.GetToAgent()
	params := BuildServiceParams(env)
	from := RemoteID(env.GetSourceSystem(), env.GetFrom())
	m.wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		defer cancel()
		if cerr := svc.DeliverService(sctx, id, from, params); cerr != nil {
			answer(seq, cerr, nil)
			return
		}
		answer(seq, nil, []string{RemoteID(m.cfg.SystemID, id)})
	})
}

// targets resolves the recipient: 2001 unknown agent, 5003 not exported
// to the sending system; a scope reaches its exported members.
func (in *inStream) targets(link *concordv1.FedLink, env *concordv1.FedEnvelope) ([]string, *CodeError) {
	local := in.m.deps.Local
	if id := env.GetToAgent(); id != "" {
		a, ok := local.Agent(id)
		if !ok {
			return nil, codeErr(CodeAgentNotFound, "Agent not found: "+id+" in system "+in.m.cfg.SystemID, map[string]any{"agentId": id})
		}
		if !Matches(link.GetExport(), agentView(a)) {
			return nil, codeErr(CodeNotExported, "Agent "+id+" is not exported to system "+in.peer, map[string]any{"agentId": id})
		}
		return []string{id}, nil
	}
	members, ok := local.ScopeMembers(env.GetToScope())
	if !ok {
		return nil, codeErr(CodeNotExported, "Scope "+env.GetToScope()+" is not exported to system "+in.peer, nil)
	}
	var out []string
	for _, id := range members {
		if a, ok := local.Agent(id); ok && Matches(link.GetExport(), agentView(a)) {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return nil, codeErr(CodeNotExported, "No member of scope "+env.GetToScope()+" is exported to system "+in.peer, nil)
	}
	return out, nil
}

func deliveryError(err error) *CodeError {
	var ce *CodeError
	if errors.As(err, &ce) {
		return ce
	}
	return codeErr(CodeDeliveryFailed, "Delivery failed: "+err.Error(), nil)
}

// ackOutcome acknowledges a forwarded envelope with the next system's
// outcome.
func (in *inStream) ackOutcome(seq uint64, o Outcome) {
	if o.Queued {
		in.mu.Lock()
		in.acks = append(in.acks, &concordv1.FedAck{Seq: seq, Queued: true})
		in.mu.Unlock()
		in.signal()
		return
	}
	in.ack(seq, o.Err, o.Delivered)
}

func (in *inStream) ack(seq uint64, cerr *CodeError, delivered []string) {
	in.pushAck(newAck(seq, cerr, delivered))
}

func newAck(seq uint64, cerr *CodeError, delivered []string) *concordv1.FedAck {
	a := &concordv1.FedAck{Seq: seq, Delivered: delivered}
	if cerr != nil {
		a.Code, a.Message = int32(cerr.Code), cerr.Message
	}
	return a
}

func (in *inStream) pushAck(a *concordv1.FedAck) {
	in.mu.Lock()
	in.acks = append(in.acks, a)
	in.mu.Unlock()
	in.signal()
}

func (in *inStream) push(f *concordv1.FedFrame) {
	in.mu.Lock()
	in.outq = append(in.outq, f)
	in.mu.Unlock()
	in.signal()
}

// endStream ends the stream (its sender reconnects).
func (in *inStream) endStream() {
	if in.end != nil {
		in.end()
	}
}

func (in *inStream) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// writer sends queued acks (batched) and frames until ctx ends.
func (in *inStream) writer(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-in.wake:
		}
		in.mu.Lock()
		acks, outq := in.acks, in.outq
		in.acks, in.outq = nil, nil
		in.mu.Unlock()
		if len(acks) > 0 {
			if err := in.stream.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Acks{Acks: &concordv1.FedAcks{Acks: acks}}}); err != nil {
				return err
			}
		}
		for _, f := range outq {
			if err := in.stream.Send(f); err != nil {
				return err
			}
		}
	}
}

// directory answers a directory request with what this system exports to
// the peer, in chunks of at most Config.DirectoryChunkBytes: nothing when
// the importer's digest shows it holds the current set (any stream can
// tell), a delta against what this stream sent last when the importer
// has exactly that version, else the full set.
func (in *inStream) directory(have uint64, haveDigest []byte) []*concordv1.FedDirectoryApply {
	link, ok := in.m.deps.State.Link(in.peer)
	if !ok {
		return nil
	}
	version := in.m.deps.Local.Version()
	cur := map[string]*concordv1.FedRemoteAgent{}
	for _, a := range in.m.deps.Local.Agents() {
		if Matches(link.GetExport(), agentView(a)) {
			cur[a.GetId()] = a
		}
	}
	keys := sortedKeys(cur)
	digest := exportDigest(cur, keys)
	in.mu.Lock()
	defer in.mu.Unlock()
	if have != 0 && bytes.Equal(digest, haveDigest) {
		// The importer holds this set: later deltas on this stream start
		// from it.
		in.sent, in.sentAt = cur, have
		return nil
	}
	u := &concordv1.FedDirectoryApply{PeerSystemId: in.m.cfg.SystemID, Version: version, Digest: digest}
	if have == 0 || have != in.sentAt || in.sent == nil {
		u.Full = true
		for _, k := range keys {
			u.Upserts = append(u.Upserts, cur[k])
		}
	} else {
		u.BaseVersion = have
		for _, k := range keys {
			if old, ok := in.sent[k]; !ok || !proto.Equal(old, cur[k]) {
				u.Upserts = append(u.Upserts, cur[k])
			}
		}
		for _, k := range sortedKeys(in.sent) {
			if _, ok := cur[k]; !ok {
				u.Removes = append(u.Removes, k)
			}
		}
		if len(u.Upserts) == 0 && len(u.Removes) == 0 {
			return nil
		}
	}
	if version <= have {
		return nil
	}
	in.sent, in.sentAt = cur, version
	return chunkDirectory(u, in.m.cfg.DirectoryChunkBytes)
}
