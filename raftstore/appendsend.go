package raftstore

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// appendSender sends AppendEntries requests that carry entries, as raft's
// NetworkTransport would, byte for byte, but with each entry's encoding
// taken from an entryCache shared by every follower (entrycache.go). It
// keeps its own pool of connections, dialled through the same stream
// layer (TLS); the receiving side is raft's own NetworkTransport handler,
// unchanged. Heartbeats, votes, snapshots and pipelined appends still go
// through raft's transport.
type appendSender struct {
	stream  raft.StreamLayer
	timeout time.Duration // per RPC, as NetworkTransportConfig.Timeout
	maxPool int           // idle connections kept per target
	cache   *entryCache

	mu     sync.Mutex
	closed bool
	idle   map[raft.ServerAddress][]*sendConn
	open   map[*sendConn]struct{} // every connection not yet closed, idle or in use
}

// rpcAppendEntries is raft's type byte for AppendEntries
// (net_transport.go); TestAppendWire_ReceivedByRaft checks it.
const rpcAppendEntries = 0

// appendEntriesWire is raft.AppendEntriesRequest with each entry already
// encoded: the same fields in the same order, so it encodes to the same
// bytes (TestAppendWire_SameBytesAsRaft).
type appendEntriesWire struct {
	raft.RPCHeader
	Term              uint64
	Leader            []byte
	PrevLogEntry      uint64
	PrevLogTerm       uint64
	Entries           []codec.Raw
	LeaderCommitIndex uint64
}

// sendConn is one connection with its buffered encoder and decoder, used
// by one RPC at a time.
type sendConn struct {
	target raft.ServerAddress
	conn   net.Conn
	w      *bufio.Writer
	enc    *codec.Encoder
	dec    *codec.Decoder
}

// sendBufferSize matches raft's connSendBufferSize: a whole batch goes to
// TLS in few writes.
const sendBufferSize = 256 << 10

func newAppendSender(stream raft.StreamLayer, timeout time.Duration, maxPool int, cache *entryCache) *appendSender {
	return &appendSender{
		stream: stream, timeout: timeout, maxPool: maxPool, cache: cache,
		idle: make(map[raft.ServerAddress][]*sendConn),
		open: make(map[*sendConn]struct{}),
	}
}

// send sends args to target and decodes the answer into resp. An error
// the follower returned comes back as an error and keeps the connection;
// any other error closes it.
func (s *appendSender) send(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	entries, err := s.cache.encode(args.Entries)
	if err != nil {
		return err
	}
	wire := appendEntriesWire{
		RPCHeader: args.RPCHeader, Term: args.Term, Leader: args.Leader,
		PrevLogEntry: args.PrevLogEntry, PrevLogTerm: args.PrevLogTerm,
		Entries: entries, LeaderCommitIndex: args.LeaderCommitIndex,
	}
	c, err := s.get(target)
	if err != nil {
		return err
	}
	if s.timeout > 0 {
		_ = c.conn.SetDeadline(time.Now().Add(s.timeout))
	}
	if err := c.roundTrip(&wire, resp); err != nil {
		var remote remoteError
		if errors.As(err, &remote) {
			s.put(c)
			return errors.New(string(remote))
		}
		s.discard(c)
		return err
	}
	s.put(c)
	return nil
}

// remoteError is an error string the follower answered with.
type remoteError string

func (e remoteError) Error() string { return string(e) }

// roundTrip writes one request and reads its answer, as raft's sendRPC
// and decodeResponse do.
func (c *sendConn) roundTrip(req *appendEntriesWire, resp *raft.AppendEntriesResponse) error {
	if err := c.w.WriteByte(rpcAppendEntries); err != nil {
		return err
	}
	if err := c.enc.Encode(req); err != nil {
		return fmt.Errorf("encode append entries: %w", err)
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	var rpcErr string
	if err := c.dec.Decode(&rpcErr); err != nil {
		return err
	}
	if err := c.dec.Decode(resp); err != nil {
		return err
	}
	if rpcErr != "" {
		return remoteError(rpcErr)
	}
	return nil
}

// get returns an idle connection to target or dials one.
func (s *appendSender) get(target raft.ServerAddress) (*sendConn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, raft.ErrTransportShutdown
	}
	if conns := s.idle[target]; len(conns) > 0 {
		c := conns[len(conns)-1]
		s.idle[target] = conns[:len(conns)-1]
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	conn, err := s.stream.Dial(target, s.timeout)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	w := bufio.NewWriterSize(conn, sendBufferSize)
	c := &sendConn{
		target: target, conn: conn, w: w,
		enc: codec.NewEncoder(w, s.cache.handle),
		dec: codec.NewDecoder(bufio.NewReader(conn), &codec.MsgpackHandle{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = conn.Close()
		return nil, raft.ErrTransportShutdown
	}
	s.open[c] = struct{}{}
	return c, nil
}

// put returns c to the idle pool, or closes it when the pool is full or
// the sender closed.
func (s *appendSender) put(c *sendConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.open[c]; !ok {
		return // closed meanwhile by closeConns
	}
	if !s.closed && len(s.idle[c.target]) < s.maxPool {
		s.idle[c.target] = append(s.idle[c.target], c)
		return
	}
	s.closeLocked(c)
}

// discard closes c after a failed RPC.
func (s *appendSender) discard(c *sendConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(c)
}

func (s *appendSender) closeLocked(c *sendConn) {
	if _, ok := s.open[c]; ok {
		delete(s.open, c)
		_ = c.conn.Close()
	}
}

// closeConns closes every connection, idle or in use (an RPC in flight
// then fails at once instead of at its deadline); with shutdown set, no
// new one is dialled either.
func (s *appendSender) closeConns(shutdown bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if shutdown {
		s.closed = true
	}
	for c := range s.open {
		s.closeLocked(c)
	}
	clear(s.idle)
}
