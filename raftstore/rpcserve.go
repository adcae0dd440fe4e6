package raftstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// rpcServer serves the raft RPCs peers send this server, in place of
// raft's NetworkTransport handler: the same protocol (a type byte, the
// msgpack request; the error string and the response back), the same
// dispatch (heartbeats to raft's fast path, everything else to raft's
// consumer channel), but AppendEntries is decoded by decodeAppendEntries
// instead of go-msgpack's reflection (appenddecode.go). The other RPC
// types are decoded and every answer encoded with raft's own codec, as
// raft does. raft's NetworkTransport still dials and sends; its listener
// gets a layer that accepts nothing (dialOnlyLayer).
type rpcServer struct {
	layer  *trackingLayer
	logger hclog.Logger

	consume   chan raft.RPC                  // raft reads RPCs here (Consumer)
	heartbeat atomic.Pointer[func(raft.RPC)] // raft's fast path, once set
	shutdown  chan struct{}                  // closed by close
	closeOnce sync.Once

	// streamCtx ends the connections served so far (closeStreams), as
	// raft's CloseStreams does for its handlers: each returns before its
	// next request.
	streamMu     sync.Mutex
	streamCtx    context.Context
	streamCancel context.CancelFunc
}

// rpc type bytes (raft's net_transport.go, in declaration order:
// rpcAppendEntries is 0); TestRPCServer_ServesRaftsRPCs checks them
// against raft's own client.
const (
	rpcRequestVote     = 1
	rpcInstallSnapshot = 2
	rpcTimeoutNow      = 3
	rpcRequestPreVote  = 4
)

// connReceiveBufferSize is raft's buffer for reading requests: a paced
// batch of entries arrives in few reads.
const connReceiveBufferSize = 256 << 10

func newRPCServer(layer *trackingLayer, logger hclog.Logger) *rpcServer {
	s := &rpcServer{layer: layer, logger: logger, consume: make(chan raft.RPC), shutdown: make(chan struct{})}
	s.streamCtx, s.streamCancel = context.WithCancel(context.Background())
	return s
}

// start accepts connections until the layer closes. The accept loop and
// every connection's handler count in the layer's handlers, which the
// Store waits for after closing the transport.
func (s *rpcServer) start() {
	s.layer.live.Add(1)
	go func() {
		defer s.layer.live.Done()
		s.acceptLoop()
	}()
}

// acceptLoop accepts connections and serves each on its own goroutine,
// retrying failed accepts with backoff as raft does, until the layer is
// closed.
func (s *rpcServer) acceptLoop() {
	const baseDelay, maxDelay = 5 * time.Millisecond, time.Second
	var delay time.Duration
	for {
		conn, err := s.layer.Accept()
		if err != nil {
			if s.layer.isClosed() {
				return
			}
			delay = min(max(2*delay, baseDelay), maxDelay)
			s.logger.Error("failed to accept connection", "error", err)
			select {
			case <-s.shutdown:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		// Accept counted the connection in the layer's handlers; its
		// Close (on the handler's way out) ends that.
		go s.serve(s.streamContext(), conn)
	}
}

// streamContext returns the context of connections accepted now.
func (s *rpcServer) streamContext() context.Context {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	return s.streamCtx
}

// closeStreams ends the connections served so far (before their next
// request) and starts a new context for later ones.
func (s *rpcServer) closeStreams() {
	if s == nil {
		return // a transport that only sends (tests)
	}
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	s.streamCancel()
	s.streamCtx, s.streamCancel = context.WithCancel(context.Background())
}

// close makes requests waiting for raft fail and the accept loop stop
// retrying; the layer's Close ends the connections.
func (s *rpcServer) close() {
	if s == nil {
		return // a transport that only sends (tests)
	}
	s.closeOnce.Do(func() {
		close(s.shutdown)
		s.closeStreams()
	})
}

// serve answers requests on conn until it fails, the peer hangs up or its
// stream context ends.
func (s *rpcServer) serve(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, connReceiveBufferSize)
	w := bufio.NewWriter(conn)
	dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
	enc := codec.NewEncoder(w, raftMsgpackHandle(false)) // raft's answers, byte for byte
	for ctx.Err() == nil {
		if err := s.handle(r, dec, enc); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, raft.ErrTransportShutdown) {
				s.logger.Error("failed to decode incoming command", "error", err)
			}
			return
		}
		if err := w.Flush(); err != nil {
			s.logger.Error("failed to flush response", "error", err)
			return
		}
	}
}

// handle reads one request, hands it to raft and writes raft's answer.
func (s *rpcServer) handle(r *bufio.Reader, dec *codec.Decoder, enc *codec.Encoder) error {
	typ, err := r.ReadByte()
	if err != nil {
		return err
	}
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{RespChan: respCh}
	heartbeat := false
	switch typ {
	case rpcAppendEntries:
		req := new(raft.AppendEntriesRequest)
		if err := decodeAppendEntries(r, req); err != nil {
			return err
		}
		rpc.Command = req
		heartbeat = isHeartbeat(req)
	case rpcRequestVote:
		req := new(raft.RequestVoteRequest)
		if err := dec.Decode(req); err != nil {
			return err
		}
		rpc.Command = req
	case rpcRequestPreVote:
		req := new(raft.RequestPreVoteRequest)
		if err := dec.Decode(req); err != nil {
			return err
		}
		rpc.Command = req
	case rpcInstallSnapshot:
		req := new(raft.InstallSnapshotRequest)
		if err := dec.Decode(req); err != nil {
			return err
		}
		rpc.Command = req
		rpc.Reader = io.LimitReader(r, req.Size)
	case rpcTimeoutNow:
		req := new(raft.TimeoutNowRequest)
		if err := dec.Decode(req); err != nil {
			return err
		}
		rpc.Command = req
	default:
		return fmt.Errorf("unknown rpc type %d", typ)
	}

	if fn := s.heartbeat.Load(); heartbeat && fn != nil {
		(*fn)(rpc)
	} else {
		select {
		case s.consume <- rpc:
		case <-s.shutdown:
			return raft.ErrTransportShutdown
		}
	}
	select {
	case resp := <-respCh:
		var msg string
		if resp.Error != nil {
			msg = resp.Error.Error()
		}
		if err := enc.Encode(msg); err != nil {
			return err
		}
		return enc.Encode(resp.Response)
	case <-s.shutdown:
		return raft.ErrTransportShutdown
	}
}

// isHeartbeat reports whether req is what raft's transport treats as a
// heartbeat (answered on its fast path, without waiting for the main
// loop): a term and leader, and nothing else.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	leader := req.Addr
	if len(leader) == 0 {
		leader = req.Leader
	}
	return req.Term != 0 && leader != nil && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// dialOnlyLayer is the stream layer raft's NetworkTransport gets: it
// dials through the real layer, but accepts nothing (rpcServer does);
// Accept waits until the layer is closed.
type dialOnlyLayer struct {
	*trackingLayer
	closed    chan struct{}
	closeOnce sync.Once
}

func newDialOnlyLayer(l *trackingLayer) *dialOnlyLayer {
	return &dialOnlyLayer{trackingLayer: l, closed: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *dialOnlyLayer) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

// Close implements net.Listener: it closes the real layer too.
func (l *dialOnlyLayer) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.trackingLayer.Close()
}
