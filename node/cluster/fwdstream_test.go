package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/internal/tcpproxy"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// hookStore is a fakeStore whose ApplyForwardedFrom is the test's.
type hookStore struct {
	*fakeStore
	apply func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error)
}

func newHookStore(id string, apply func(context.Context, []byte) (raftstore.ForwardReply, error)) *hookStore {
	return &hookStore{fakeStore: &fakeStore{id: id}, apply: apply}
}

func (h *hookStore) ApplyForwardedFrom(ctx context.Context, _ string, cmd []byte) (raftstore.ForwardReply, error) {
	h.calls.Add(1)
	return h.apply(ctx, cmd)
}

// rpcCounter counts a server's Forward calls, ForwardStreams and the
// batches received on them.
type rpcCounter struct{ unary, streams, batches atomic.Int64 }

func (c *rpcCounter) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == concordv1.Cluster_Forward_FullMethodName {
				c.unary.Add(1)
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if info.FullMethod == concordv1.Cluster_ForwardStream_FullMethodName {
				c.streams.Add(1)
				ss = &countedRecvStream{ServerStream: ss, n: &c.batches}
			}
			return h(srv, ss)
		}),
	}
}

type countedRecvStream struct {
	grpc.ServerStream
	n *atomic.Int64
}

func (s *countedRecvStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.n.Add(1)
	}
	return err
}

// startCountedServer serves store as node id with its RPCs counted.
func startCountedServer(t *testing.T, id string, store RaftStore) (*runningServer, *rpcCounter) {
	cnt := &rpcCounter{}
	cfg := testConfig(t, id)
	cfg.ServerOptions = cnt.options()
	return startServer(t, cfg, ServerDeps{Store: store}, nil), cnt
}

func newTestForwarder(t *testing.T, cfg Config, res AddrResolver) *Forwarder {
	t.Helper()
	fwd, err := NewForwarder(cfg, res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fwd.Close() })
	return fwd
}

// numbered is a command carrying i, which the hook stores echo.
func numbered(i int) []byte {
	return binary.BigEndian.AppendUint32([]byte{byte(concordv1.CommandType_COMMAND_TYPE_NOOP)}, uint32(i))
}

func numberOf(cmd []byte) uint64 { return uint64(binary.BigEndian.Uint32(cmd[1:])) }

// forwardEach starts n writers, writer i forwarding numbered(i) to target;
// the channel gets each one's error, or what check (when not nil) found
// wrong with its reply.
func forwardEach(ctx context.Context, fwd *Forwarder, target string, n int, check func(i int, reply raftstore.ForwardReply) error) <-chan error {
	errs := make(chan error, n)
	for i := range n {
		go func() {
			reply, err := fwd.Forward(ctx, target, "", numbered(i))
			if err == nil && check != nil {
				err = check(i, reply)
			}
			errs <- err
		}()
	}
	return errs
}

// TestForwardStream_ConcurrentWritesOneStream: 64 concurrent writes share
// one stream; the leader runs all of them at once (none is answered until
// the 64th arrived), answers them in whatever order they finish, and each
// caller gets its own command's index and result.
func TestForwardStream_ConcurrentWritesOneStream(t *testing.T) {
	const n = 64
	var arrived atomic.Int64
	all := make(chan struct{})
	hs := newHookStore("L", func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-ctx.Done():
			return raftstore.ForwardReply{}, ctx.Err()
		}
		return raftstore.ForwardReply{Index: 1000 + numberOf(cmd), Result: cmd, HasResult: true}, nil
	})
	srv, cnt := startCountedServer(t, "L", hs)
	fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver("L", srv.addr))
	ctx := testCtx(t)
	errs := forwardEach(ctx, fwd, "L", n, func(i int, reply raftstore.ForwardReply) error {
		if reply.Index != 1000+uint64(i) || !reply.HasResult || numberOf(reply.Result) != uint64(i) {
			return fmt.Errorf("write %d answered with index %d, result %x", i, reply.Index, reply.Result)
		}
		return nil
	})
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if s, u := cnt.streams.Load(), cnt.unary.Load(); s != 1 || u != 0 {
		t.Fatalf("%d streams and %d unary calls, want 1 stream", s, u)
	}
	t.Logf("%d writes in %d batches", n, cnt.batches.Load())
}

// TestForwardStream_LeaderBoundsInFlight: the leader runs at most
// ForwardStreamMaxInFlight commands of a stream at a time; the rest wait
// on the follower's side of flow control, then complete.
func TestForwardStream_LeaderBoundsInFlight(t *testing.T) {
	const n, limit = 16, 4
	var inside, most atomic.Int64
	release := make(chan struct{})
	hs := newHookStore("L", func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		cur := inside.Add(1)
		defer inside.Add(-1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
			return raftstore.ForwardReply{}, ctx.Err()
		}
		return raftstore.ForwardReply{Index: numberOf(cmd)}, nil
	})
	cfg := testConfig(t, "L")
	cfg.ForwardStreamMaxInFlight = limit
	srv := startServer(t, cfg, ServerDeps{Store: hs}, nil)
	fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver("L", srv.addr))
	ctx := testCtx(t)
	errs := forwardEach(ctx, fwd, "L", n, nil)
	eventually(t, 5*time.Second, func() error {
		if got := inside.Load(); got != limit {
			return fmt.Errorf("%d commands running, want %d", got, limit)
		}
		return nil
	})
	// Nothing more may start while those run: give the other twelve,
	// queued at the follower since the start, a moment to (wrongly) arrive.
	time.Sleep(100 * time.Millisecond)
	close(release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if m := most.Load(); m != limit {
		t.Fatalf("at most %d commands ran at once, want %d", m, limit)
	}
}

// TestForwardStream_CallerDeadline: the leader sees the caller's remaining
// deadline; a caller whose deadline passes gets ErrTimeout (and
// DeadlineExceeded) in time, whether its command is at the leader or still
// waiting for room on the follower; the slots it held are freed.
func TestForwardStream_CallerDeadline(t *testing.T) {
	var leaderDeadline atomic.Pointer[time.Time]
	hold := make(chan struct{})
	hs := newHookStore("L", func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		if d, ok := ctx.Deadline(); ok && numberOf(cmd) == 1 {
			leaderDeadline.Store(&d)
		}
		select {
		case <-hold:
			return raftstore.ForwardReply{Index: numberOf(cmd)}, nil
		case <-ctx.Done():
			return raftstore.ForwardReply{}, ctx.Err()
		}
	})
	srv := startServer(t, testConfig(t, "L"), ServerDeps{Store: hs}, nil)
	cfg := testConfig(t, "origin")
	cfg.ForwardStreamQueue = 1
	fwd := newTestForwarder(t, cfg, newResolver("L", srv.addr))

	// At the leader: it gives up with the caller.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := fwd.Forward(ctx, "L", "", numbered(1))
	if !errors.Is(err, raftstore.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Forward past its deadline = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	mustBeWithin(t, start, 1500*time.Millisecond, "Forward with a 300 ms deadline") // not the 2 s attempt bound
	// The timeout travels as a duration (as gRPC's own does): the leader's
	// deadline is the caller's plus the transit, far below the 2 s attempt
	// bound it would otherwise get.
	d := leaderDeadline.Load()
	if d == nil || d.After(mustDeadline(ctx).Add(scaled(200*time.Millisecond))) || d.Before(start) {
		t.Fatalf("the leader's deadline %v, want at most the caller's %v", d, mustDeadline(ctx))
	}

	// Waiting for room: the one slot is held by a write at the leader.
	first := make(chan error, 1)
	go func() {
		_, err := fwd.Forward(testCtx(t), "L", "", numbered(2))
		first <- err
	}()
	eventually(t, 5*time.Second, func() error {
		if hs.calls.Load() != 2 {
			return errors.New("second write not at the leader yet")
		}
		return nil
	})
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := fwd.Forward(ctx2, "L", "", numbered(3)); !errors.Is(err, raftstore.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Forward waiting for room = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	if c := hs.calls.Load(); c != 2 {
		t.Fatalf("%d commands reached the leader, want 2 (the timed-out one was never sent)", c)
	}
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if reply, err := fwd.Forward(testCtx(t), "L", "", numbered(4)); err != nil || reply.Index != 4 {
		t.Fatalf("Forward after the slots were freed = %d, %v", reply.Index, err)
	}
}

// TestForwardStream_StuckSendHonoursDeadlines: a leader that stops
// reading (its in-flight bound reached, its commands stuck) fills the
// HTTP/2 windows until the writer sending blocks in Send; every writer,
// that one too (the send watchdog breaks the stream), still returns soon
// after its deadline.
func TestForwardStream_StuckSendHonoursDeadlines(t *testing.T) {
	release := make(chan struct{})
	hs := newHookStore("L", func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		select {
		case <-release:
			return raftstore.ForwardReply{Index: 1}, nil
		case <-ctx.Done():
			return raftstore.ForwardReply{}, ctx.Err()
		}
	})
	cfg := testConfig(t, "L")
	cfg.ForwardStreamMaxInFlight = 1
	srv := startServer(t, cfg, ServerDeps{Store: hs}, nil)
	fcfg := testConfig(t, "origin")
	fcfg.ForwardAttemptTimeout = time.Minute // the leader's slot stays taken
	fwd := newTestForwarder(t, fcfg, newResolver("L", srv.addr))
	first := make(chan error, 1) // holds the leader's one slot until released
	go func() {
		_, err := fwd.Forward(testCtx(t), "L", "", numbered(0))
		first <- err
	}()
	defer func() {
		close(release)
		<-first
	}()
	eventually(t, 5*time.Second, func() error {
		if hs.calls.Load() != 1 {
			return errors.New("first write not at the leader yet")
		}
		return nil
	})
	const n, size = 40, 1 << 20 // 40 MiB: far beyond gRPC's flow-control windows
	big := append(numbered(1), make([]byte, size)...)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := fwd.Forward(ctx, "L", "", big)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; !errors.Is(err, raftstore.ErrTimeout) {
			t.Fatalf("write to a leader that stopped reading = %v, want ErrTimeout", err)
		}
	}
	mustBeWithin(t, start, 2*time.Second, "writes with a 300 ms deadline to a stuck leader")
}

// TestForwardStream_BreakFailsInFlightWithoutResend: when the connection
// breaks with writes at the leader, each fails with ErrLeadershipLost
// (they may have been proposed) and none is sent again; the next write
// opens a new stream.
func TestForwardStream_BreakFailsInFlightWithoutResend(t *testing.T) {
	const n = 8
	var blocking atomic.Bool
	blocking.Store(true)
	hs := newHookStore("L", func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		if blocking.Load() {
			<-ctx.Done() // the stream's end cancels it
			return raftstore.ForwardReply{}, ctx.Err()
		}
		return raftstore.ForwardReply{Index: numberOf(cmd)}, nil
	})
	srv, cnt := startCountedServer(t, "L", hs)
	px := tcpproxy.Start(t, srv.addr)
	fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver("L", px.Addr()))
	ctx := testCtx(t)
	errs := forwardEach(ctx, fwd, "L", n, nil)
	eventually(t, 5*time.Second, func() error {
		if c := hs.calls.Load(); c != n {
			return fmt.Errorf("%d of %d writes at the leader", c, n)
		}
		return nil
	})
	px.Cut()
	for range n {
		if err := <-errs; !errors.Is(err, raftstore.ErrLeadershipLost) {
			t.Fatalf("write cut off at the leader = %v, want ErrLeadershipLost", err)
		}
	}
	blocking.Store(false)
	if reply, err := fwd.Forward(ctx, "L", "", numbered(99)); err != nil || reply.Index != 99 {
		t.Fatalf("Forward after the break = %d, %v", reply.Index, err)
	}
	if c := hs.calls.Load(); c != n+1 {
		t.Fatalf("%d commands reached the leader, want %d: a cut-off write was sent again", c, n+1)
	}
	if s := cnt.streams.Load(); s != 2 {
		t.Fatalf("%d streams opened, want 2", s)
	}
}

// TestForwardStream_LeaderChange: writes at a leader that loses leadership
// fail with ErrLeadershipLost and are not re-sent; later writes bounce off
// it (NOT_LEADER) onto a stream to the new leader.
func TestForwardStream_LeaderChange(t *testing.T) {
	lose := make(chan struct{})
	var deposed atomic.Bool
	a := newHookStore("A", func(ctx context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		if deposed.Load() {
			return raftstore.ForwardReply{}, &raftstore.NotLeaderError{LeaderID: "B"}
		}
		select {
		case <-lose:
			return raftstore.ForwardReply{}, fmt.Errorf("stepped down: %w", raftstore.ErrLeadershipLost)
		case <-ctx.Done():
			return raftstore.ForwardReply{}, ctx.Err()
		}
	})
	b := newHookStore("B", func(_ context.Context, cmd []byte) (raftstore.ForwardReply, error) {
		return raftstore.ForwardReply{Index: 500 + numberOf(cmd)}, nil
	})
	srvA := startServer(t, testConfig(t, "A"), ServerDeps{Store: a}, nil)
	srvB, cntB := startCountedServer(t, "B", b)
	fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver("A", srvA.addr, "B", srvB.addr))
	ctx := testCtx(t)
	const n = 4
	errs := forwardEach(ctx, fwd, "A", n, nil)
	eventually(t, 5*time.Second, func() error {
		if c := a.calls.Load(); c != n {
			return fmt.Errorf("%d of %d writes at A", c, n)
		}
		return nil
	})
	deposed.Store(true)
	close(lose)
	for range n {
		if err := <-errs; !errors.Is(err, raftstore.ErrLeadershipLost) {
			t.Fatalf("write at the deposed leader = %v, want ErrLeadershipLost", err)
		}
	}
	if c := b.calls.Load(); c != 0 {
		t.Fatalf("%d writes re-sent to B", c)
	}
	reply, err := fwd.Forward(ctx, "A", "", numbered(7))
	if err != nil || reply.Index != 507 {
		t.Fatalf("Forward after the change = %d, %v; want B's index 507", reply.Index, err)
	}
	if s, u := cntB.streams.Load(), cntB.unary.Load(); s != 1 || u != 0 {
		t.Fatalf("B saw %d streams and %d unary calls, want 1 stream", s, u)
	}
}

// oldCluster is the Cluster service of a version without ForwardStream.
type oldCluster struct {
	concordv1.UnimplementedClusterServer
	calls atomic.Int64
}

func (o *oldCluster) Forward(_ context.Context, req *concordv1.ForwardRequest) (*concordv1.ForwardResponse, error) {
	o.calls.Add(1)
	return &concordv1.ForwardResponse{Index: 100 + numberOf(req.GetCommand()), Result: req.GetCommand()}, nil
}

// TestForwardStream_FallsBackToUnaryOnOldLeader: a leader that answers
// UNIMPLEMENTED ran nothing; every write, those already on the stream
// included, goes through unary Forward, and later ones directly.
func TestForwardStream_FallsBackToUnaryOnOldLeader(t *testing.T) {
	old := &oldCluster{}
	lis := listen(t, "")
	gs := grpc.NewServer()
	concordv1.RegisterClusterServer(gs, old)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver("L", lis.Addr().String()))
	ctx := testCtx(t)
	const n = 8
	errs := forwardEach(ctx, fwd, "L", n, func(i int, reply raftstore.ForwardReply) error {
		if reply.Index != 100+uint64(i) || numberOf(reply.Result) != uint64(i) {
			return fmt.Errorf("write %d answered with %d, %x", i, reply.Index, reply.Result)
		}
		return nil
	})
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if fwd.streamable("L") {
		t.Fatal("the old leader is still sent streams")
	}
	if reply, err := fwd.Forward(ctx, "L", "", numbered(9)); err != nil || reply.Index != 109 {
		t.Fatalf("Forward to the old leader = %d, %v", reply.Index, err)
	}
	if c := old.calls.Load(); c != n+1 {
		t.Fatalf("%d unary calls, want %d", c, n+1)
	}
}

// TestFwdStream_TakeBatch: the sender takes what is queued, in order, up
// to the count and byte bounds (at least one command), dropping (and
// freeing the slots of) requests whose callers gave up.
func TestFwdStream_TakeBatch(t *testing.T) {
	tests := []struct {
		name      string
		sizes     []int
		abandoned map[int]bool
		maxN      int
		maxBytes  int
		want      []int // queue positions taken
	}{
		{"all of a small queue", []int{10, 10, 10}, nil, 8, 100, []int{0, 1, 2}},
		{"count bound", []int{1, 1, 1, 1, 1}, nil, 2, 100, []int{0, 1}},
		{"byte bound", []int{40, 40, 40}, nil, 8, 100, []int{0, 1}},
		{"one command larger than the bound", []int{500, 1}, nil, 8, 100, []int{0}},
		{"abandoned dropped", []int{1, 1, 1, 1}, map[int]bool{0: true, 2: true}, 8, 100, []int{1, 3}},
		{"abandoned do not count", []int{1, 1, 1, 1}, map[int]bool{0: true, 1: true}, 1, 100, []int{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "origin")
			cfg.ForwardStreamMaxBatch, cfg.ForwardStreamMaxBatchBytes = tc.maxN, tc.maxBytes
			fwd := newTestForwarder(t, cfg, newResolver())
			s := newFwdStream(fwd, "L", "addr")
			var reqs []*fwdReq
			for i, size := range tc.sizes {
				r := &fwdReq{cmd: make([]byte, size), done: make(chan fwdOutcome, 1)}
				s.slots <- struct{}{}
				if !s.enqueue(r) {
					t.Fatal("enqueue refused")
				}
				if tc.abandoned[i] {
					s.abandon(r)
				}
				reqs = append(reqs, r)
			}
			s.mu.Lock()
			items, _ := s.takeBatch()
			left := len(s.queue)
			s.mu.Unlock()
			if len(items) != len(tc.want) {
				t.Fatalf("took %d commands, want %d", len(items), len(tc.want))
			}
			for k, pos := range tc.want {
				r := reqs[pos]
				if r.state != reqSent || items[k].GetId() != r.id || s.inflight[r.id] != r || items[k].GetTimeoutMs() == 0 {
					t.Fatalf("item %d is not request %d in flight: %+v", k, pos, items[k])
				}
			}
			dropped := 0
			last := tc.want[len(tc.want)-1]
			for i := 0; i < last; i++ {
				if tc.abandoned[i] {
					dropped++
				}
			}
			if want := len(tc.sizes) - 1 - last; left != want {
				t.Fatalf("%d left queued, want %d", left, want)
			}
			if held := len(s.slots); held != len(tc.sizes)-dropped {
				t.Fatalf("%d slots held, want %d", held, len(tc.sizes)-dropped)
			}
			s.cancel()
		})
	}
}

// TestFwdStream_TakeBatchDropsExpired: a request still queued when its
// deadline (its attempt's) passes is never sent: its caller is answering
// its own caller with an error now, and the leader must not run it after.
// It ends as never sent (ErrTimeout, retryable while the caller waits)
// and frees its slot.
func TestFwdStream_TakeBatchDropsExpired(t *testing.T) {
	fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver())
	s := newFwdStream(fwd, "L", "addr")
	defer s.cancel()
	past, future := time.Now().Add(-time.Millisecond), time.Now().Add(time.Minute)
	var reqs []*fwdReq
	for _, d := range []time.Time{past, future, past} {
		r := &fwdReq{cmd: []byte{1}, done: make(chan fwdOutcome, 1), deadline: d}
		s.slots <- struct{}{}
		if !s.enqueue(r) {
			t.Fatal("enqueue refused")
		}
		reqs = append(reqs, r)
	}
	s.mu.Lock()
	items, _ := s.takeBatch()
	left := len(s.queue)
	s.mu.Unlock()
	if len(items) != 1 || items[0].GetId() != reqs[1].id || left != 0 {
		t.Fatalf("took %d items (%v), %d left queued; want only the request with time left", len(items), items, left)
	}
	for _, i := range []int{0, 2} {
		r := reqs[i]
		if r.state != reqDone || r.id != 0 {
			t.Fatalf("expired request %d: state %d id %d, want done, never sent", i, r.state, r.id)
		}
		out := <-r.done
		if out.sent || !errors.Is(out.err, raftstore.ErrTimeout) {
			t.Fatalf("expired request %d ended %+v, want a never-sent ErrTimeout", i, out)
		}
	}
	if held := len(s.slots); held != 1 {
		t.Fatalf("%d slots held, want 1 (the request on the wire)", held)
	}
}

// TestFwdStream_FailOutcomes: how the requests of a failed stream end,
// per cause: on the wire, "outcome unknown" (never retried); queued,
// retried elsewhere; UNIMPLEMENTED, unary for all; Close, ErrClosed.
func TestFwdStream_FailOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		cause       error
		closed      bool
		fallback    bool // both fall back to Forward
		sentErr     error
		sentRetry   bool
		unsentErr   error
		unsentRetry bool
	}{
		{"connection lost", status.Error(codes.Unavailable, "connection reset"), false, false, raftstore.ErrLeadershipLost, false, nil, true},
		{"stream cancelled by the leader", status.Error(codes.Canceled, "canceled"), false, false, raftstore.ErrLeadershipLost, false, nil, true},
		{"old leader", status.Error(codes.Unimplemented, "unknown method"), false, true, nil, false, nil, false},
		{"forwarder closed", status.Error(codes.Canceled, "closing"), true, false, raftstore.ErrLeadershipLost, false, ErrClosed, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fwd := newTestForwarder(t, testConfig(t, "origin"), newResolver())
			s := newFwdStream(fwd, "L", "addr")
			sent := &fwdReq{cmd: []byte{1}, done: make(chan fwdOutcome, 1)}
			queued := &fwdReq{cmd: []byte{1}, done: make(chan fwdOutcome, 1)}
			for _, r := range []*fwdReq{sent, queued} {
				s.slots <- struct{}{}
				s.enqueue(r)
			}
			s.mu.Lock()
			s.queue = s.queue[:1] // take the first alone
			s.takeBatch()
			s.queue = append(s.queue, queued)
			s.mu.Unlock()
			if tc.closed {
				fwd.end()
			}
			s.fail(tc.cause)
			if len(s.slots) != 0 || s.enqueue(&fwdReq{}) {
				t.Fatalf("failed stream holds %d slots or takes requests", len(s.slots))
			}
			ctx := context.Background()
			check := func(what string, r *fwdReq, want error, wantRetry bool) {
				_, _, err, retry, fallback := fwd.outcome(ctx, "L", <-r.done)
				if tc.fallback {
					if !fallback {
						t.Fatalf("%s: %v, want a fallback to Forward", what, err)
					}
					return
				}
				if fallback || retry != wantRetry || err == nil || (want != nil && !errors.Is(err, want)) {
					t.Fatalf("%s: %v (retry %v, fallback %v), want %v retry %v", what, err, retry, fallback, want, wantRetry)
				}
			}
			check("sent", sent, tc.sentErr, tc.sentRetry)
			check("queued", queued, tc.unsentErr, tc.unsentRetry)
			if tc.fallback && fwd.streamable("L") {
				t.Fatal("UNIMPLEMENTED did not switch L to unary calls")
			}
		})
	}
}
