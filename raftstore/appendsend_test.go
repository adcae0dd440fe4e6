package raftstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// wireRequests are AppendEntries requests covering what the encoding
// depends on: no entries, each log type, empty and large payloads (above
// entryCacheMaxBytes, so never cached), extensions, zero and non-zero
// times, a deprecated Leader field.
func wireRequests() map[string]*raft.AppendEntriesRequest {
	at := time.Date(2026, 12, 1, 22, 30, 0, 123456789, time.UTC)
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")}
	entry := func(i uint64, typ raft.LogType, data []byte) *raft.Log {
		return &raft.Log{Index: i, Term: 3, Type: typ, Data: data, AppendedAt: at.Add(time.Duration(i))}
	}
	many := make([]*raft.Log, 300)
	for i := range many {
		many[i] = entry(uint64(100+i), raft.LogCommand, []byte(fmt.Sprintf("command %d", i)))
	}
	return map[string]*raft.AppendEntriesRequest{
		"no entries": {RPCHeader: hdr, Term: 3, PrevLogEntry: 9, PrevLogTerm: 2, LeaderCommitIndex: 8},
		"one command": {RPCHeader: hdr, Term: 3, Leader: []byte("127.0.0.1:7000"), PrevLogEntry: 9, PrevLogTerm: 2,
			Entries: []*raft.Log{entry(10, raft.LogCommand, []byte{1, 0, 2})}, LeaderCommitIndex: 9},
		"every type": {RPCHeader: hdr, Term: 3, PrevLogEntry: 9, PrevLogTerm: 3, Entries: []*raft.Log{
			entry(10, raft.LogNoop, nil),
			entry(11, raft.LogConfiguration, []byte("cfg")),
			entry(12, raft.LogBarrier, nil),
			{Index: 13, Term: 3, Type: raft.LogCommand, Data: []byte("x"), Extensions: []byte("ext")},
			entry(14, raft.LogCommand, bytes.Repeat([]byte("big"), entryCacheMaxBytes)),
		}, LeaderCommitIndex: 12},
		"a full batch": {RPCHeader: hdr, Term: 3, PrevLogEntry: 99, PrevLogTerm: 3, Entries: many, LeaderCommitIndex: 350},
	}
}

// raftEncode encodes v (a request or an entry) as raft's NetworkTransport
// does.
func raftEncode(t *testing.T, v any) []byte {
	t.Helper()
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	var b []byte
	if err := codec.NewEncoderBytes(&b, h).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b
}

// bufferConn is a sendConn writing to a buffer.
func bufferConn(s *appendSender) (*sendConn, *bytes.Buffer) {
	var buf bytes.Buffer
	c := s.newConn("test", nil)
	c.w = bufio.NewWriter(&buf)
	return c, &buf
}

// The request appendSender writes is, byte for byte, the one raft's
// transport writes (type byte, then the request), whether its entries come
// from the cache or not: old and new servers cannot tell the difference.
func TestAppendWire_SameBytesAsRaft(t *testing.T) {
	s := newAppendSender(nil, 0, 1, newEntryCache(false))
	for name, req := range wireRequests() {
		t.Run(name, func(t *testing.T) {
			want := append([]byte{rpcAppendEntries}, raftEncode(t, req)...)
			for _, pass := range []string{"cold", "warm"} {
				c, buf := bufferConn(s)
				if err := s.writeRequest(c, req); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf.Bytes(), want) {
					t.Fatalf("%s cache: %d bytes differ from raft's %d", pass, buf.Len(), len(want))
				}
			}
		})
	}
}

// An ID or address holding what the Entries field encodes to makes the
// splice ambiguous: the sender writes nothing and says so (errNoSplice),
// and raftTransport sends the request through raft's own transport, which
// raft receives intact.
func TestAppendWire_FieldLookalikeFallsBack(t *testing.T) {
	req := wireRequests()["one command"]
	req.ID, req.Addr, req.Leader = entriesNil, append(slices.Clip(entriesNil), entriesNil...), entriesNil
	s := newAppendSender(nil, 0, 1, newEntryCache(false))
	c, buf := bufferConn(s)
	if err := s.writeRequest(c, req); !errors.Is(err, errNoSplice) || buf.Len() > 0 {
		t.Fatalf("writeRequest: %v with %d bytes written, want errNoSplice and nothing", err, buf.Len())
	}

	peer := startRaftPeer(t, func(req *raft.AppendEntriesRequest) (*raft.AppendEntriesResponse, error) {
		return &raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil
	})
	layer, err := newTCPStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	trans := &raftTransport{
		NetworkTransport: raft.NewNetworkTransport(layer, 1, 5*time.Second, io.Discard),
		pace:             &pacer{},
		sender:           newAppendSender(layer, 5*time.Second, 1, newEntryCache(false)),
	}
	t.Cleanup(func() { _ = trans.Close() })
	var resp raft.AppendEntriesResponse
	if err := trans.AppendEntries("peer", peer.trans.LocalAddr(), req, &resp); err != nil || !resp.Success {
		t.Fatalf("append: %+v, %v", resp, err)
	}
	if got := recv(t, peer.got, "the request at raft"); !sameRequest(got, req) {
		t.Fatalf("raft received %+v, sent %+v", got, req)
	}
}

// A cache hit needs the same entry: another entry at the same index (a
// different term, payload, type or time) is encoded afresh, and what is
// written is raft's encoding of the entry given either way.
func TestEntryCache_HitsOnlyTheSameEntry(t *testing.T) {
	base := raft.Log{Index: 5, Term: 2, Type: raft.LogCommand, Data: []byte("abc"), AppendedAt: time.Unix(10, 0)}
	tests := []struct {
		name   string
		change func(*raft.Log)
		hit    bool
	}{
		{"same entry, another copy", func(*raft.Log) {}, true},
		{"other term", func(l *raft.Log) { l.Term = 3 }, false},
		{"other payload", func(l *raft.Log) { l.Data = []byte("abd") }, false},
		{"payload moved to extensions", func(l *raft.Log) { l.Data, l.Extensions = []byte("ab"), []byte("c") }, false},
		{"other type", func(l *raft.Log) { l.Type = raft.LogNoop }, false},
		{"other time", func(l *raft.Log) { l.AppendedAt = time.Unix(11, 0) }, false},
		{"slot reused by a later index", func(l *raft.Log) { l.Index += entryCacheSlots }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := newEntryCache(false)
			write := func(l *raft.Log) []byte {
				var buf bytes.Buffer
				w := bufio.NewWriter(&buf)
				if _, err := cache.writeEntries(w, []*raft.Log{l}, nil); err != nil {
					t.Fatal(err)
				}
				_ = w.Flush()
				return buf.Bytes()
			}
			first := base
			write(&first)
			other := base
			other.Data = bytes.Clone(base.Data)
			tt.change(&other)
			got := write(&other)
			if hit := cache.misses.Load() == 1; hit != tt.hit {
				t.Fatalf("cache hit %v, want %v", hit, tt.hit)
			}
			if want := append([]byte{0x91}, raftEncode(t, &other)...); !bytes.Equal(got, want) {
				t.Fatalf("encoding differs from raft's")
			}
		})
	}
}

// raftPeer is a plain raft NetworkTransport on loopback answering
// AppendEntries with answer.
type raftPeer struct {
	trans *raft.NetworkTransport
	got   chan *raft.AppendEntriesRequest
	stop  chan struct{}
	done  chan struct{}
}

func startRaftPeer(t *testing.T, answer func(*raft.AppendEntriesRequest) (*raft.AppendEntriesResponse, error)) *raftPeer {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := &raftPeer{trans: trans, got: make(chan *raft.AppendEntriesRequest, 16), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case rpc := <-trans.Consumer():
				req, ok := rpc.Command.(*raft.AppendEntriesRequest)
				if !ok {
					rpc.Respond(nil, fmt.Errorf("unexpected %T", rpc.Command))
					continue
				}
				p.got <- req
				rpc.Respond(answer(req))
			case <-p.stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(p.stop)
		<-p.done
		_ = trans.Close()
	})
	return p
}

// silentPeer returns the address of a listener that accepts one
// connection and never reads or answers on it.
func silentPeer(t *testing.T) raft.ServerAddress {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			held <- c
		}
		close(held)
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for c := range held {
			_ = c.Close()
		}
	})
	return raft.ServerAddress(ln.Addr().String())
}

// testSender returns an appendSender dialling plain TCP on loopback.
func testSender(t *testing.T, timeout time.Duration) *appendSender {
	t.Helper()
	layer, err := newTCPStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	s := newAppendSender(layer, timeout, 2, newEntryCache(false))
	t.Cleanup(func() {
		s.closeConns(true)
		_ = layer.Close()
	})
	return s
}

// raft's own transport receives what appendSender sends as the request it
// was (type byte, every field, every entry), answers reach the caller, and
// an error the follower answers keeps the connection for the next RPC.
func TestAppendWire_ReceivedByRaft(t *testing.T) {
	var calls int
	peer := startRaftPeer(t, func(req *raft.AppendEntriesRequest) (*raft.AppendEntriesResponse, error) {
		calls++
		if calls == 2 {
			return nil, errors.New("log write failed")
		}
		return &raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry + uint64(len(req.Entries)), Success: true}, nil
	})
	s := testSender(t, 5*time.Second)
	target := peer.trans.LocalAddr()
	req := wireRequests()["every type"]
	for i := range 3 {
		var resp raft.AppendEntriesResponse
		err := s.send(target, req, &resp)
		got := recv(t, peer.got, "the request at raft")
		if !sameRequest(got, req) {
			t.Fatalf("rpc %d: raft received %+v, sent %+v", i+1, got, req)
		}
		switch {
		case i == 1 && (err == nil || err.Error() != "log write failed"):
			t.Fatalf("rpc 2: err %v, want the follower's error", err)
		case i != 1 && (err != nil || !resp.Success || resp.LastLog != 14):
			t.Fatalf("rpc %d: %+v, %v", i+1, resp, err)
		}
	}
	s.mu.Lock()
	open := len(s.open)
	s.mu.Unlock()
	if open != 1 {
		t.Fatalf("%d connections open, want the one reused throughout", open)
	}
}

// sameRequest compares requests as decoded: times compare as instants.
func sameRequest(a, b *raft.AppendEntriesRequest) bool {
	if len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		x, y := *a.Entries[i], *b.Entries[i]
		if !x.AppendedAt.Equal(y.AppendedAt) {
			return false
		}
		x.AppendedAt, y.AppendedAt = time.Time{}, time.Time{}
		if len(x.Data) == 0 && len(y.Data) == 0 {
			x.Data, y.Data = nil, nil
		}
		if len(x.Extensions) == 0 && len(y.Extensions) == 0 {
			x.Extensions, y.Extensions = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	ha, hb := *a, *b
	ha.Entries, hb.Entries = nil, nil
	if len(ha.Leader) == 0 && len(hb.Leader) == 0 {
		ha.Leader, hb.Leader = nil, nil
	}
	return reflect.DeepEqual(ha, hb)
}

// Closing the sender fails an append waiting on a follower that never
// answers at once, not at the RPC deadline, and refuses further ones.
func TestAppendSender_CloseFailsInFlight(t *testing.T) {
	silent := silentPeer(t)
	s := testSender(t, time.Minute)
	req := wireRequests()["one command"]
	errc := make(chan error, 1)
	go func() { errc <- s.send(silent, req, &raft.AppendEntriesResponse{}) }()
	// Wait until the RPC is in flight on its connection.
	eventually(t, 5*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.open) != 1 {
			return errors.New("no connection dialled yet")
		}
		return nil
	})
	s.closeConns(true)
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("append succeeded against a silent follower")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("append still waiting after close")
	}
	if err := s.send(silent, req, &raft.AppendEntriesResponse{}); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Fatalf("send after close: %v, want ErrTransportShutdown", err)
	}
}

// BenchmarkAppendEncode measures the leader's encoding of one batch for
// 6 followers (3 voters + 4 non-voters): raft's transport encodes the
// whole request per follower; appendSender takes each entry's encoding
// from the cache after the first follower. Entries are ~300 bytes, as a
// registry update is.
func BenchmarkAppendEncode(b *testing.B) {
	const followers = 6
	for _, n := range []int{8, 64, 256} {
		entries := make([]*raft.Log, n)
		at := time.Now()
		for i := range entries {
			entries[i] = &raft.Log{Index: uint64(i + 1), Term: 2, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 300), AppendedAt: at}
		}
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1"), Addr: []byte("127.0.0.1:7000")}, Term: 2, Entries: entries}
		b.Run(fmt.Sprintf("raft/entries=%d", n), func(b *testing.B) {
			h := &codec.MsgpackHandle{}
			h.TimeNotBuiltin = true
			var buf bytes.Buffer
			enc := codec.NewEncoder(&buf, h)
			b.ReportAllocs()
			for range b.N {
				for range followers {
					buf.Reset()
					if err := enc.Encode(req); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("shared/entries=%d", n), func(b *testing.B) {
			s := newAppendSender(nil, 0, 1, newEntryCache(false))
			c := s.newConn("bench", nil)
			c.w = bufio.NewWriterSize(io.Discard, sendBufferSize)
			b.ReportAllocs()
			for range b.N {
				// A new batch each time: the first follower misses.
				for _, e := range entries {
					e.Index += uint64(n)
				}
				for range followers {
					if err := s.writeRequest(c, req); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// blockingCloseLayer dials TCP; connections to slow close only once
// release is closed, as a TLS close_notify toward a silent peer does.
type blockingCloseLayer struct {
	raft.StreamLayer
	slow    raft.ServerAddress
	closing chan struct{} // receives when a slow close starts
	release chan struct{}
}

func (l *blockingCloseLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(addr, timeout)
	if err != nil || addr != l.slow {
		return c, err
	}
	return &blockingCloseConn{Conn: c, layer: l}, nil
}

type blockingCloseConn struct {
	net.Conn
	layer *blockingCloseLayer
}

func (c *blockingCloseConn) Close() error {
	c.layer.closing <- struct{}{}
	<-c.layer.release
	return c.Conn.Close()
}

// A connection whose close blocks (a follower gone silent behind TLS)
// must not hold up appends to the other followers.
func TestAppendSender_SlowCloseDoesNotBlockOthers(t *testing.T) {
	silent := silentPeer(t)
	peer := startRaftPeer(t, func(req *raft.AppendEntriesRequest) (*raft.AppendEntriesResponse, error) {
		return &raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil
	})
	tcp, err := newTCPStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	layer := &blockingCloseLayer{StreamLayer: tcp, slow: silent,
		closing: make(chan struct{}, 1), release: make(chan struct{})}
	s := newAppendSender(layer, 300*time.Millisecond, 1, newEntryCache(false))
	deadDone := make(chan error, 1)
	release := sync.OnceFunc(func() { close(layer.release) })
	t.Cleanup(func() {
		release()
		<-deadDone
		s.closeConns(true)
		_ = tcp.Close()
	})
	req := wireRequests()["one command"]
	go func() { deadDone <- s.send(layer.slow, req, &raft.AppendEntriesResponse{}) }()
	recv(t, layer.closing, "the silent follower's connection closing")

	var resp raft.AppendEntriesResponse
	liveDone := make(chan error, 1)
	go func() { liveDone <- s.send(peer.trans.LocalAddr(), req, &resp) }()
	select {
	case err := <-liveDone:
		if err != nil || !resp.Success {
			t.Fatalf("append to the live follower: %+v, %v", resp, err)
		}
	case <-time.After(2 * time.Second):
		release() // let both sends finish before failing
		<-liveDone
		t.Fatal("append to the live follower still waiting while another connection was closing")
	}
	recv(t, peer.got, "the request at raft")
}
