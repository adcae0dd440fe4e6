package raftstore

import (
	"bufio"
	"bytes"
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
// taken from an entryCache shared by every follower (entrycache.go):
// raft's encoder writes the request without entries, and the cached
// entries go in place of its nil. It keeps its own pool of connections,
// dialled through the same stream layer (TLS); the receiving side is
// raft's own NetworkTransport handler, unchanged. Heartbeats, votes,
// snapshots and pipelined appends still go through raft's transport.
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

// entriesNil is how the request encodes with Entries nil: the key, then
// msgpack nil. send encodes the request that way and writes the entries
// in place of the nil. Should an ID or address hold these very bytes too,
// the field is ambiguous and the request goes through raft's transport
// (errNoSplice).
var entriesNil = []byte("\xa7Entries\xc0")

// errNoSplice says the request was not sent (nothing was written): send
// it through raft's transport instead.
var errNoSplice = errors.New("append entries: Entries field not found exactly once in the encoded request")

// sendConn is one connection with its buffered writer, decoder and
// scratch buffers, used by one RPC at a time.
type sendConn struct {
	target raft.ServerAddress
	conn   net.Conn
	w      *bufio.Writer
	dec    *codec.Decoder

	head    []byte         // the request without entries
	headEnc *codec.Encoder // encodes into head
	scratch []byte         // an entry missing from the cache
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

// send sends args (with entries) to target and decodes the answer into
// resp. An error the follower returned comes back as an error and keeps
// the connection, as errNoSplice does; any other error closes it.
func (s *appendSender) send(target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	c, err := s.get(target)
	if err != nil {
		return err
	}
	if s.timeout > 0 {
		_ = c.conn.SetDeadline(time.Now().Add(s.timeout))
	}
	err = s.writeRequest(c, args)
	if err == nil {
		err = s.readResponse(c, resp)
	}
	return s.release(c, err)
}

// begin writes args to an idle connection to target, by writeBy, and
// returns it for end to read the answer from; without an idle connection
// it writes nothing and returns nil. It never dials: a new connection
// (and its TLS handshake) would hold up the caller, raft's leader
// goroutine for the early append.
func (s *appendSender) begin(target raft.ServerAddress, args *raft.AppendEntriesRequest, writeBy time.Time) (*sendConn, error) {
	s.mu.Lock()
	var c *sendConn
	if conns := s.idle[target]; !s.closed && len(conns) > 0 {
		c = conns[len(conns)-1]
		s.idle[target] = conns[:len(conns)-1]
	}
	s.mu.Unlock()
	if c == nil {
		return nil, nil
	}
	_ = c.conn.SetWriteDeadline(writeBy)
	if err := s.writeRequest(c, args); err != nil {
		return nil, s.release(c, err)
	}
	if s.timeout > 0 {
		_ = c.conn.SetDeadline(time.Now().Add(s.timeout))
	} else {
		_ = c.conn.SetDeadline(time.Time{})
	}
	return c, nil
}

// end reads the answer to the request begin wrote on c.
func (s *appendSender) end(c *sendConn, resp *raft.AppendEntriesResponse) error {
	return s.release(c, s.readResponse(c, resp))
}

// release returns c to the pool after an RPC that ended with err, or
// closes it when the stream may be out of step, and returns err.
func (s *appendSender) release(c *sendConn, err error) error {
	var remote remoteError
	switch {
	case err == nil:
		s.put(c)
		return nil
	case errors.As(err, &remote):
		s.put(c)
		return errors.New(string(remote))
	case errors.Is(err, errNoSplice):
		s.put(c)
		return err
	}
	s.discard(c)
	return err
}

// remoteError is an error string the follower answered with.
type remoteError string

func (e remoteError) Error() string { return string(e) }

// readResponse reads one answer, as raft's decodeResponse does.
func (s *appendSender) readResponse(c *sendConn, resp *raft.AppendEntriesResponse) error {
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

// writeRequest writes the type byte and the request, and flushes; on
// errNoSplice it has written nothing.
func (s *appendSender) writeRequest(c *sendConn, args *raft.AppendEntriesRequest) error {
	hdr := *args
	hdr.Entries = nil
	c.head = c.head[:0]
	c.headEnc.ResetBytes(&c.head)
	if err := c.headEnc.Encode(&hdr); err != nil {
		return fmt.Errorf("encode append entries: %w", err)
	}
	at := bytes.Index(c.head, entriesNil)
	if at < 0 || bytes.Count(c.head, entriesNil) != 1 {
		return errNoSplice
	}
	at += len(entriesNil) - 1 // the nil
	_ = c.w.WriteByte(rpcAppendEntries)
	_, _ = c.w.Write(c.head[:at])
	var err error
	if c.scratch, err = s.cache.writeEntries(c.w, args.Entries, c.scratch); err != nil {
		return err
	}
	_, _ = c.w.Write(c.head[at+1:])
	return c.w.Flush() // the first write error, if any
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
	c := s.newConn(target, conn)
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.open[c] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		_ = closeAbruptly(conn)
		return nil, raft.ErrTransportShutdown
	}
	return c, nil
}

// newConn wraps conn.
func (s *appendSender) newConn(target raft.ServerAddress, conn net.Conn) *sendConn {
	return &sendConn{
		target: target, conn: conn,
		w:       bufio.NewWriterSize(conn, sendBufferSize),
		dec:     codec.NewDecoder(bufio.NewReader(conn), &codec.MsgpackHandle{}),
		headEnc: codec.NewEncoderBytes(new([]byte), s.cache.handle),
	}
}

// put returns c to the idle pool, or closes it when the pool is full or
// the sender closed.
func (s *appendSender) put(c *sendConn) {
	s.mu.Lock()
	if _, ok := s.open[c]; !ok {
		s.mu.Unlock()
		return // closed meanwhile by closeConns
	}
	if !s.closed && len(s.idle[c.target]) < s.maxPool {
		s.idle[c.target] = append(s.idle[c.target], c)
		s.mu.Unlock()
		return
	}
	delete(s.open, c)
	s.mu.Unlock()
	_ = closeAbruptly(c.conn)
}

// discard closes c after a failed RPC.
func (s *appendSender) discard(c *sendConn) {
	s.mu.Lock()
	_, ok := s.open[c]
	delete(s.open, c)
	s.mu.Unlock()
	if ok {
		_ = closeAbruptly(c.conn)
	}
}

// closeConns closes every connection, idle or in use (an RPC in flight
// then fails instead of waiting for its deadline); with shutdown set, no
// new one is dialled either.
//
// Every close here is abrupt (closeAbruptly): a TLS close_notify toward a
// peer that has gone silent would wait up to 5 s per connection, holding
// up Shutdown or a reset (and, under mu, every other follower's appends).
func (s *appendSender) closeConns(shutdown bool) {
	s.mu.Lock()
	if shutdown {
		s.closed = true
	}
	conns := make([]*sendConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	clear(s.open)
	clear(s.idle)
	s.mu.Unlock()
	for _, c := range conns {
		_ = closeAbruptly(c.conn)
	}
}
