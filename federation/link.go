package federation

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/federation/connclose"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// maxBatch and maxBatchBytes bound one stream message: well under the
// peer's gRPC message limit (16 MiB by default), whatever the envelopes
// weigh (one envelope always goes, alone if need be).
const (
	maxBatch      = 64
	maxBatchBytes = 4 << 20
)

// upQueueFactor scales a link's outage bounds into the bounds of its send
// queue while a stream is up (16,000 messages / 160 MB by default).
const upQueueFactor = 16

// outLink is this node's stream to one linked system: it picks one of the
// peer's servers (spread by a hash of this node's id), keeps the stream
// open, moves to the next server with jittered backoff when it breaks,
// and holds messages in the bounded buffer while no stream is up.
//
// Lock order: sendMu, then mu.
type outLink struct {
	m    *Manager
	peer string
	log  *slog.Logger

	// sendMu is held by whoever writes on the stream (gRPC allows one
	// Send at a time) and, for batches, from numbering them until they
	// were written, so envelopes go out in seq order (link_send.go).
	sendMu sync.Mutex

	mu       sync.Mutex
	link     *concordv1.FedLink
	buf      buffer
	up       bool
	inflight map[uint64]*inflight
	seq      uint64
	wake     chan struct{} // cap 1: buffer or state changed
	stopped  bool
	stopErr  *CodeError
	cancel   context.CancelFunc
	stopCh   chan struct{}
	resync   bool // a directory gap: ask for everything next time
	dirTicks int  // directory ticks so far (a follower asks every followerDirEvery-th)
	// Guaranteed messages (guaranteed.go): when each outbox seq sent on
	// this stream may be sent again (and whether it is held), and the
	// peer's answers not yet stored.
	gsent map[uint64]gsend
	gacks []*concordv1.FedAck
	// Relaying (relay.go): on the leader, whether a relay call is out and
	// until when nothing may send after one failed, when to ask again
	// after no node took a batch; on a relay node, the leader's messages
	// waiting for this stream.
	relaying  bool
	relayHold time.Time
	relayNext time.Time
	relayQ    []*inflight
	rwake     chan struct{} // cap 1: wakes relayLoop

	// The up stream, for inline sends (nil: none), and what ends its
	// session (link_send.go).
	cur       concordv1.Federation_LinkClient
	curCancel context.CancelFunc

	// Direct streams (direct.go). On the main link, dir holds them; on a
	// direct one home is the peer server it dials, parent the main link,
	// end stops its session, and lastUse is when a message last came in.
	dir     *directs
	home    string
	parent  *outLink
	end     context.CancelFunc
	lastUse time.Time

	// stats
	sent, reconnects uint64
	rtt              time.Duration
	connectedTo      string
}

type inflight struct {
	it     *item
	sentAt time.Time
	gseq   uint64 // outbox seq of a guaranteed message, else 0
	// relay, on a relay node, hands the peer's ack to the leader's call.
	relay func(*concordv1.FedAck)
}

func newOutLink(m *Manager, l *concordv1.FedLink) *outLink {
	return &outLink{
		m: m, peer: l.GetPeerSystemId(), link: l, log: m.log.With("peer", l.GetPeerSystemId()),
		inflight: map[uint64]*inflight{}, wake: make(chan struct{}, 1), stopCh: make(chan struct{}),
		gsent: map[uint64]gsend{}, rwake: make(chan struct{}, 1), dir: newDirects(),
	}
}

func (l *outLink) isUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

func (l *outLink) policy() *concordv1.FedLink {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.link
}

func (l *outLink) update(link *concordv1.FedLink) {
	l.mu.Lock()
	l.link = link
	l.mu.Unlock()
	l.updateDirects(link)
}

func (l *outLink) bufferPolicy() *concordv1.FedBufferPolicy {
	if p := l.link.GetBuffer(); p.GetOverflow() != concordv1.FedOverflow_FED_OVERFLOW_UNSPECIFIED {
		return p
	}
	return DefaultBufferPolicy()
}

func (l *outLink) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
	select {
	case l.rwake <- struct{}{}:
	default:
	}
}

// enqueue buffers env; the sender hears the outcome from the ack when a
// stream is up, else "queued" at once (or the overflow refusal).
func (l *outLink) enqueue(env *concordv1.FedEnvelope, done func(Outcome)) {
	l.admit(&item{env: env, size: envSize(env), at: l.m.now(), done: done}).finish()
}

// admission is what admit decided for one item; finish tells its sender
// and wakes the stream, outside every lock (a sender's done may send
// again).
type admission struct {
	l       *outLink
	done    func(Outcome)
	dropped []*item
	refuse  *CodeError
	up      bool
	inline  bool
}

// admit takes it into the link's queue (or refuses it); the caller runs
// finish on the result. It takes l.mu: a caller may hold the link's
// directs.mu (direct.go), never l.mu.
func (l *outLink) admit(it *item) admission {
	a := admission{l: l, done: it.done}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		a.refuse = l.stopErr
		return a
	}
	a.up = l.up
	if a.up {
		// With a stream up the buffer is only the send queue: the outage
		// bounds (what may wait for a stream) do not apply, or a burst
		// larger than MaxMessages would be dropped from a healthy link.
		// A stream that stalls (a blackholed peer not yet noticed) must
		// not hold unbounded memory either: past upQueueFactor times the
		// outage bounds new messages are refused, retryable, and nothing
		// is dropped. What is still queued when the stream breaks becomes
		// outage backlog, trimmed by the policy on the next push.
		if p := l.bufferPolicy(); (p.GetMaxMessages() > 0 && len(l.buf.items) >= upQueueFactor*int(p.GetMaxMessages())) ||
			(p.GetMaxBytes() > 0 && uint64(l.buf.bytes+it.size) > upQueueFactor*p.GetMaxBytes()) {
			a.refuse = codeErr(CodeUnavailable, "Federation link to "+l.peer+" is congested: its send queue is full", map[string]any{"retryable": true, "systemId": l.peer})
		} else {
			l.buf.items = append(l.buf.items, it)
			l.buf.bytes += it.size
			a.inline = l.idleFor(it)
			l.lastUse = it.at
		}
		return a
	}
	it.done = nil
	a.dropped, a.refuse = l.buf.push(it, l.bufferPolicy(), it.at)
	return a
}

func (a admission) finish() {
	tellDropped(a.dropped)
	switch {
	case a.refuse != nil:
		if a.done != nil {
			a.done(Outcome{Err: a.refuse})
		}
	case !a.up:
		if a.done != nil {
			a.done(Outcome{Queued: true})
		}
	case a.inline:
		a.l.sendNow()
	default:
		a.l.signal()
	}
}

func tellDropped(items []*item) {
	for _, it := range items {
		if it.done != nil {
			it.done(Outcome{Err: errDropped()})
		}
	}
}

// stop ends the link for good (unlinked, or the node stops): every
// waiting sender hears err.
func (l *outLink) stop(err *CodeError) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped, l.stopErr = true, err
	items := l.buf.takeAll()
	for _, f := range l.inflight {
		items = append(items, f.it)
	}
	l.inflight = map[uint64]*inflight{}
	l.mu.Unlock()
	close(l.stopCh)
	tell(items, Outcome{Err: err})
}

// run connects, serves, and reconnects until ctx ends or stop.
func (l *outLink) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	var relayWG sync.WaitGroup
	relayWG.Add(2)
	go func() { defer relayWG.Done(); l.relayLoop(ctx) }()
	go func() { defer relayWG.Done(); l.directLoop(ctx) }()
	defer func() { cancel(); relayWG.Wait() }()
	go func() { // stop cancels the session too
		select {
		case <-l.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := int(hashString(l.m.cfg.NodeID))
	for attempt := 0; ctx.Err() == nil; attempt++ {
		link := l.policy()
		addrs := slices.Sorted(slices.Values(link.GetPeerAddrs()))
		addr := addrs[(start+attempt)%len(addrs)]
		wasUp, err := l.session(ctx, link, addr)
		if ctx.Err() != nil {
			return
		}
		if wasUp {
			attempt = 0 // a stream that worked moves on without waiting long
		}
		l.log.Debug("federation stream ended", "addr", addr, "err", err)
		d := jitter(attempt, l.m.cfg.BackoffMin, l.m.cfg.BackoffMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// jitter is full-jitter exponential backoff.
func jitter(attempt int, lo, hi time.Duration) time.Duration {
	d := lo << min(attempt, 20)
	if d > hi || d <= 0 {
		d = hi
	}
	return lo/2 + rand.N(d)
}

func hashString(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// transportCredentials are link's: TLS from the node, or plaintext in dev
// mode; nothing else.
func (m *Manager) transportCredentials(link *concordv1.FedLink) (credentials.TransportCredentials, error) {
	switch {
	case m.cfg.Credentials != nil:
		c, err := m.cfg.Credentials(link)
		if err != nil {
			return nil, fmt.Errorf("federation credentials for %s: %w", link.GetPeerSystemId(), err)
		}
		return c, nil
	case m.cfg.Plaintext:
		return insecure.NewCredentials(), nil
	default:
		return nil, ErrTLSRequired
	}
}

// peerClient is a client connection to a server of a peer system. Its
// Close is prompt even when that server stopped reading: gRPC's own waits
// up to 5 s for a GOAWAY it never takes (and TLS's close_notify as long),
// holding a link's reconnect or the Manager's Close; past connclose.Grace
// the sockets are cut.
type peerClient struct {
	*grpc.ClientConn
	creds *connclose.Credentials
}

// Close implements io.Closer.
func (c peerClient) Close() error {
	return connclose.CloseWithin(c.ClientConn.Close, connclose.Grace, c.creds.Abort)
}

// dial opens a client connection to addr, a server of link's system.
func (m *Manager) dial(link *concordv1.FedLink, addr string) (peerClient, error) {
	inner, err := m.transportCredentials(link)
	if err != nil {
		return peerClient{}, err
	}
	creds := connclose.NewCredentials(inner)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if d := m.cfg.Dialer; d != nil {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d(ctx, a) }))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return peerClient{}, fmt.Errorf("dial %s: %w", addr, err)
	}
	return peerClient{ClientConn: cc, creds: creds}, nil
}

// session runs one stream to addr until it breaks. wasUp reports whether
// the handshake succeeded.
func (l *outLink) session(ctx context.Context, link *concordv1.FedLink, addr string) (wasUp bool, err error) {
	conn, err := l.m.dial(link, addr)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Opening the stream and the hello/welcome exchange are bounded: a
	// blackholed server must not hold the link.
	timer := time.AfterFunc(l.m.cfg.CallTimeout, cancel)
	stream, err := concordv1.NewFederationClient(conn).Link(sctx)
	if err != nil {
		timer.Stop()
		return false, fmt.Errorf("open link stream to %s: %w", addr, err)
	}
	welcome, err := l.handshake(stream)
	if !timer.Stop() || err != nil {
		return false, errors.Join(err, sctx.Err())
	}
	l.attach(stream, cancel)
	l.connected(addr)
	defer l.disconnected(addr)
	if l.home == "" {
		l.m.wg.Add(1)
		go func() { defer l.m.wg.Done(); l.refreshAddrs(ctx, welcome.GetAddrs()) }()
	}
	var lastRecv atomic.Int64
	lastRecv.Store(time.Now().UnixNano())
	recvErr := make(chan error, 1)
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); recvErr <- l.receive(sctx, stream, &lastRecv) }()
	silent := make(chan struct{})
	go func() { // a blackholed peer never errors: give up when it goes quiet
		defer close(silent)
		watchSilence(sctx, cancel, &lastRecv, l.m.cfg.Ping)
	}()
	err = l.sendLoop(sctx, stream, recvErr)
	cancel()
	<-silent
	<-recvDone
	l.detach()
	l.sendMu.Lock() // an inline send may still be writing
	_ = stream.CloseSend()
	l.sendMu.Unlock()
	return true, err
}

// silenceLimit is how many ping intervals without any frame from the
// peer (a pong answers every ping) end a stream.
const silenceLimit = 4

// watchSilence cancels the session when nothing arrived for silenceLimit
// ping intervals; it returns when ctx ends.
func watchSilence(ctx context.Context, cancel context.CancelFunc, last *atomic.Int64, ping time.Duration) {
	t := time.NewTicker(ping)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if time.Since(time.Unix(0, last.Load())) > silenceLimit*ping {
				cancel()
				return
			}
		}
	}
}

// handshake sends hello and waits (bounded) for a welcome naming the
// linked system: a peer answering for another system is refused.
func (l *outLink) handshake(stream concordv1.Federation_LinkClient) (*concordv1.FedWelcome, error) {
	if err := stream.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Hello{Hello: &concordv1.FedHello{
		SystemId: l.m.cfg.SystemID, NodeId: l.m.cfg.NodeID, Direct: l.home != ""}}}); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	f, err := stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("await welcome: %w", err)
	}
	w := f.GetWelcome()
	if w == nil || w.GetSystemId() != l.peer {
		return nil, fmt.Errorf("%w: peer answered as system %q, want %q", ErrInvalidCommand, w.GetSystemId(), l.peer)
	}
	return w, nil
}

// refreshAddrs stores the peer's current server list when it differs
// from the link's (on the leader only: one proposer per system).
func (l *outLink) refreshAddrs(ctx context.Context, addrs []string) {
	if len(addrs) == 0 || l.home != "" || !l.m.deps.IsLeader() ||
		slices.Equal(slices.Sorted(slices.Values(addrs)), slices.Sorted(slices.Values(l.policy().GetPeerAddrs()))) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.m.cfg.CallTimeout)
	defer cancel()
	_, _, err := l.m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_ADDRS,
		&concordv1.FedLinkAddrs{PeerSystemId: l.peer, Addrs: addrs})
	if err != nil {
		l.log.Debug("refresh peer addresses", "err", err)
	}
}

func (l *outLink) connected(addr string) {
	if l.home != "" {
		l.directUp()
		return
	}
	l.mu.Lock()
	l.up, l.connectedTo = true, addr
	l.reconnects++
	l.mu.Unlock()
	l.signal()
	l.log.Info("federation link up", "addr", addr)
	l.m.event("federation_connected", l.peer, map[string]any{"systemId": l.peer, "nodeId": l.m.cfg.NodeID, "server": addr})
}

// disconnected marks the link down: in-flight messages' senders hear
// 5000 (their outcome is unknown: the peer may have delivered them); the
// ones still buffered stay, in order, for the next stream, and their
// senders hear "queued".
func (l *outLink) disconnected(addr string) {
	if l.home != "" {
		l.retire(directBroken)
		return
	}
	l.mu.Lock()
	l.up, l.connectedTo = false, ""
	fl := l.inflight
	l.inflight = map[uint64]*inflight{}
	for _, f := range fl {
		if f.gseq != 0 {
			// They may still be delivered through that stream's server:
			// no relay (a second path) until they would have timed out.
			l.relayNext = l.m.now().Add(l.m.cfg.AckTimeout)
			break
		}
	}
	clear(l.gsent) // unanswered outbox messages go again on the next stream
	l.gacks = nil  // the peer answers again ("duplicate")
	queued := detachWaiting(l.buf.items)
	relayed := l.relayQ
	l.relayQ = nil
	l.mu.Unlock()
	failRelayed(relayed, l.peer)
	for _, f := range fl {
		if f.it.done != nil {
			f.it.done(Outcome{Err: codeErr(CodeUnavailable, "Federation link to "+l.peer+" lost before the peer acknowledged; the message may or may not have been delivered",
				map[string]any{"retryable": true, "systemId": l.peer})})
		}
	}
	tellQueued(queued)
	l.log.Info("federation link down", "addr", addr)
	l.m.event("federation_disconnected", l.peer, map[string]any{"systemId": l.peer, "nodeId": l.m.cfg.NodeID, "server": addr})
}

// sendLoop drains the buffer onto the stream in order, asks for directory
// changes (leader only), pings, and expires unacknowledged messages.
func (l *outLink) sendLoop(ctx context.Context, stream concordv1.Federation_LinkClient, recvErr <-chan error) error {
	dir := time.NewTicker(l.m.cfg.DirectorySync)
	defer dir.Stop()
	ping := time.NewTicker(l.m.cfg.Ping)
	defer ping.Stop()
	if err := l.requestDirectory(stream); err != nil {
		return err
	}
	for {
		if err := l.flush(ctx, stream); err != nil {
			return err
		}
		l.commitAcks(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			return err
		case <-l.wake:
		case <-dir.C:
			if err := l.requestDirectory(stream); err != nil {
				return err
			}
		case <-ping.C:
			if l.home != "" && l.retire(directIdle) {
				return errDirectIdle
			}
			l.expireInflight()
			if err := l.sendFrame(stream, &concordv1.FedFrame{Frame: &concordv1.FedFrame_Ping{Ping: &concordv1.FedPing{SentUnixNano: time.Now().UnixNano()}}}); err != nil {
				return fmt.Errorf("send ping: %w", err)
			}
		}
	}
}

// followerDirEvery: a follower asks for directory changes every this
// many directory ticks (the leader every tick), so the import goes on
// when the leader's stream is down; with the digest an unchanged
// directory costs the exporter one comparison.
const followerDirEvery = 3

// requestDirectory asks the peer for its directory changes: the leader on
// every tick, a follower on every followerDirEvery-th. Any node may
// import what comes back (importDirectory); Raft orders the proposals and
// the state ignores what it has already.
func (l *outLink) requestDirectory(stream concordv1.Federation_LinkClient) error {
	l.mu.Lock()
	l.dirTicks++
	ask := l.home == "" && (l.m.deps.IsLeader() || l.dirTicks%followerDirEvery == 0)
	resync := ask && l.resync
	if resync {
		l.resync = false
	}
	l.mu.Unlock()
	if !ask {
		return nil
	}
	var have uint64
	var digest []byte
	if !resync {
		have, digest = l.m.deps.State.ImportedVersion(l.peer)
	}
	if err := l.sendFrame(stream, &concordv1.FedFrame{Frame: &concordv1.FedFrame_DirRequest{DirRequest: &concordv1.FedDirectoryRequest{
		HaveVersion: have, HaveDigest: digest}}}); err != nil {
		return fmt.Errorf("send directory request: %w", err)
	}
	return nil
}

// flush sends everything buffered, in batches, oldest first, and (on the
// leader) the guaranteed messages due.
func (l *outLink) flush(ctx context.Context, stream concordv1.Federation_LinkClient) error {
	drain := l.home == "" && l.mayDrain(ctx) // a direct stream carries no guaranteed messages
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	for {
		l.mu.Lock()
		expired := l.buf.expire(l.bufferPolicy(), l.m.now())
		now := l.m.now()
		batch, bytes := l.nextBatch(now)
		if drain {
			l.drainBatch(batch, bytes, now)
		}
		l.mu.Unlock()
		tellDropped(expired)
		if len(batch.Envelopes) == 0 {
			return nil
		}
		if err := stream.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Batch{Batch: batch}}); err != nil {
			return fmt.Errorf("send batch: %w", err)
		}
	}
}

// expireInflight fails messages whose ack is overdue.
func (l *outLink) expireInflight() {
	limit := l.m.now().Add(-l.m.cfg.AckTimeout)
	l.mu.Lock()
	var late []*item
	for seq, f := range l.inflight {
		if f.sentAt.Before(limit) {
			late = append(late, f.it)
			delete(l.inflight, seq)
		}
	}
	l.mu.Unlock()
	for _, it := range late {
		if it.done != nil {
			it.done(Outcome{Err: codeErr(CodeUnavailable, "Federation peer "+l.peer+" did not acknowledge in time", map[string]any{"retryable": true})})
		}
	}
}

// receive handles acks, directory updates and pongs until the stream ends.
func (l *outLink) receive(ctx context.Context, stream concordv1.Federation_LinkClient, last *atomic.Int64) error {
	for {
		f, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		last.Store(time.Now().UnixNano())
		switch fr := f.GetFrame().(type) {
		case *concordv1.FedFrame_Acks:
			l.acked(fr.Acks.GetAcks())
		case *concordv1.FedFrame_DirUpdate:
			l.importDirectory(ctx, fr.DirUpdate)
		case *concordv1.FedFrame_Pong:
			l.mu.Lock()
			l.rtt = time.Since(time.Unix(0, fr.Pong.GetSentUnixNano()))
			l.mu.Unlock()
			l.refreshAddrs(ctx, fr.Pong.GetAddrs())
		}
	}
}

func (l *outLink) acked(acks []*concordv1.FedAck) {
	done := make([]*inflight, len(acks))
	guaranteed := false
	l.mu.Lock() // once per frame: acks come in batches
	for i, a := range acks {
		f := l.inflight[a.GetSeq()]
		delete(l.inflight, a.GetSeq())
		switch {
		case f != nil && f.gseq != 0:
			l.guaranteedAcked(f.gseq, a)
			guaranteed = true
			continue
		case f != nil && f.relay != nil:
			f.relay(a) // answers the relay call; never blocks
			continue
		}
		done[i] = f
	}
	l.mu.Unlock()
	if guaranteed {
		l.signal()
	}
	for i, a := range acks {
		f := done[i]
		if f == nil || f.it.done == nil {
			continue
		}
		switch {
		case a.GetCode() != 0:
			f.it.done(Outcome{Err: codeErr(int(a.GetCode()), a.GetMessage(), map[string]any{"systemId": l.peer})})
		case a.GetQueued():
			f.it.done(Outcome{Queued: true})
		default:
			f.it.done(Outcome{Delivered: a.GetDelivered()})
		}
	}
}

// importDirectory proposes one chunk of a directory update from the peer
// (this node asked for it). A gap makes the next request ask for
// everything.
func (l *outLink) importDirectory(ctx context.Context, u *concordv1.FedDirectoryApply) {
	u.PeerSystemId = l.peer // the stream's peer, whatever the frame says
	if proto.Size(u) > MaxDirectoryChunkBytes {
		l.log.Warn("directory chunk too large: ignored, asking for everything again", "bytes", proto.Size(u))
		l.mu.Lock()
		l.resync = true
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.m.cfg.CallTimeout)
	defer cancel()
	_, _, err := l.m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_DIRECTORY_CHUNK, &concordv1.FedDirectoryChunk{Update: u})
	if errors.Is(err, ErrDirectoryGap) {
		l.mu.Lock()
		l.resync = true
		l.mu.Unlock()
		l.signal()
		return
	}
	if err != nil {
		l.log.Debug("import directory", "err", err)
	}
}

// fill copies the link's live figures into st.
func (l *outLink) fill(st *concordv1.FedLinkStatus) {
	st.DirectStreams, st.DirectSent = l.directStats()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.up:
		st.State = "up"
		st.StreamsUp++
	case l.reconnects == 0:
		st.State = "connecting"
	}
	st.ConnectedTo, st.RttUs = l.connectedTo, l.rtt.Microseconds()
	st.QueueDepth, st.QueueBytes = uint32(len(l.buf.items)), uint64(l.buf.bytes)
	st.Sent, st.Dropped, st.Reconnects = l.sent+st.DirectSent, l.buf.dropped, l.reconnects
}
