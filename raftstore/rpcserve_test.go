package raftstore

import (
	"bytes"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testServerTransport returns a transport as the Store builds it, on
// loopback, and closes it (waiting for its handlers) at the test's end.
func testServerTransport(t *testing.T) *raftTransport {
	t.Helper()
	stop := make(chan struct{})
	cfg := Config{BindAddr: "127.0.0.1:0", MaxPool: 2, TransportTimeout: 5 * time.Second}
	trans, layer, err := newTransport(cfg, newHCLogAdapter(slog.New(slog.DiscardHandler), "raft"), stop)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(stop)
		_ = trans.Close()
		layer.handlers().Wait()
	})
	return trans
}

// rpcServer serves every RPC raft's own client sends (raft v1.8.0's
// NetworkTransport, as an old peer would): each request reaches raft's
// consumer (or, for a heartbeat, the fast path) intact, with a snapshot's
// data after it, and raft's client decodes each answer intact.
func TestRPCServer_ServesRaftsRPCs(t *testing.T) {
	server := testServerTransport(t)
	heartbeats := make(chan raft.RPC, 1)
	server.SetHeartbeatHandler(func(rpc raft.RPC) { heartbeats <- rpc })

	client, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	target := server.LocalAddr()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(client.LocalAddr())}
	snapshot := bytes.Repeat([]byte("snapshot data "), 1000)

	// answer answers the next RPC raft's consumer gets with resp, after
	// checking it is want (and reading a snapshot's data).
	answer := func(want any, resp any) <-chan error {
		errc := make(chan error, 1)
		go func() {
			select {
			case rpc := <-server.Consumer():
				if !reflect.DeepEqual(rpc.Command, want) && !sameAppend(rpc.Command, want) {
					t.Errorf("server got %+v, sent %+v", rpc.Command, want)
				}
				if rpc.Reader != nil {
					data, err := io.ReadAll(rpc.Reader)
					if err != nil || !bytes.Equal(data, snapshot) {
						t.Errorf("snapshot data: %d bytes, %v", len(data), err)
					}
				}
				rpc.Respond(resp, nil)
				errc <- nil
			case <-time.After(10 * time.Second):
				errc <- io.ErrNoProgress
			}
		}()
		return errc
	}
	check := func(name string, errc <-chan error, err error, got, want any) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("%s: no request reached raft", name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: client got %+v, want %+v", name, got, want)
		}
	}

	for name, req := range decodeRequests() {
		if isHeartbeat(req) {
			continue
		}
		req.Addr = hdr.Addr
		want := &raft.AppendEntriesResponse{RPCHeader: hdr, Term: req.Term, LastLog: 12, Success: true, NoRetryBackoff: true}
		errc := answer(req, want)
		var got raft.AppendEntriesResponse
		err := client.AppendEntries("s", target, req, &got)
		check("append "+name, errc, err, &got, want)
	}

	vote := &raft.RequestVoteRequest{RPCHeader: hdr, Term: 5, LastLogIndex: 9, LastLogTerm: 4, LeadershipTransfer: true}
	voteResp := &raft.RequestVoteResponse{RPCHeader: hdr, Term: 5, Granted: true}
	errc := answer(vote, voteResp)
	var gotVote raft.RequestVoteResponse
	check("vote", errc, client.RequestVote("s", target, vote, &gotVote), &gotVote, voteResp)

	pre := &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 6, LastLogIndex: 9, LastLogTerm: 4}
	preResp := &raft.RequestPreVoteResponse{RPCHeader: hdr, Term: 5, Granted: true}
	errc = answer(pre, preResp)
	var gotPre raft.RequestPreVoteResponse
	check("pre-vote", errc, client.RequestPreVote("s", target, pre, &gotPre), &gotPre, preResp)

	now := &raft.TimeoutNowRequest{RPCHeader: hdr}
	nowResp := &raft.TimeoutNowResponse{RPCHeader: hdr}
	errc = answer(now, nowResp)
	var gotNow raft.TimeoutNowResponse
	check("timeout now", errc, client.TimeoutNow("s", target, now, &gotNow), &gotNow, nowResp)

	snap := &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: 1, Term: 5, LastLogIndex: 100, LastLogTerm: 4,
		Configuration: []byte("cfg"), ConfigurationIndex: 3, Size: int64(len(snapshot))}
	snapResp := &raft.InstallSnapshotResponse{RPCHeader: hdr, Term: 5, Success: true}
	errc = answer(snap, snapResp)
	var gotSnap raft.InstallSnapshotResponse
	check("snapshot", errc, client.InstallSnapshot("s", target, snap, &gotSnap, bytes.NewReader(snapshot)), &gotSnap, snapResp)

	// A heartbeat goes to the fast path, not the consumer.
	hb := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 7}
	hbResp := &raft.AppendEntriesResponse{RPCHeader: hdr, Term: 7, Success: true}
	hbc := make(chan error, 1)
	go func() {
		select {
		case rpc := <-heartbeats:
			if !reflect.DeepEqual(rpc.Command, hb) {
				t.Errorf("heartbeat %+v, sent %+v", rpc.Command, hb)
			}
			rpc.Respond(hbResp, nil)
			hbc <- nil
		case rpc := <-server.Consumer():
			rpc.Respond(nil, io.ErrUnexpectedEOF)
			hbc <- io.ErrUnexpectedEOF
		}
	}()
	var gotHB raft.AppendEntriesResponse
	check("heartbeat", hbc, client.AppendEntries("s", target, hb, &gotHB), &gotHB, hbResp)

	// An error raft answers with reaches the client as an error, and the
	// connection serves the next request.
	failing := &raft.RequestVoteRequest{RPCHeader: hdr, Term: 8}
	go func() {
		rpc := <-server.Consumer()
		rpc.Respond(nil, io.ErrShortWrite)
	}()
	if err := client.RequestVote("s", target, failing, new(raft.RequestVoteResponse)); err == nil || err.Error() != io.ErrShortWrite.Error() {
		t.Fatalf("vote raft refused: %v, want %v", err, io.ErrShortWrite)
	}
	errc = answer(vote, voteResp)
	gotVote = raft.RequestVoteResponse{}
	check("vote after an error", errc, client.RequestVote("s", target, vote, &gotVote), &gotVote, voteResp)
}

// sameAppend compares append requests as decoded (sameRequest).
func sameAppend(got, want any) bool {
	a, ok1 := got.(*raft.AppendEntriesRequest)
	b, ok2 := want.(*raft.AppendEntriesRequest)
	return ok1 && ok2 && sameRequest(a, b)
}

// Garbage on a connection closes it; the server goes on serving others.
func TestRPCServer_GarbageClosesConnection(t *testing.T) {
	server := testServerTransport(t)
	conn, err := server.server.layer.Dial(server.LocalAddr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// An AppendEntries whose body is not a map.
	if _, err := conn.Write([]byte{rpcAppendEntries, 0x93, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}

	client, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	go func() {
		rpc := <-server.Consumer()
		rpc.Respond(&raft.TimeoutNowResponse{}, nil)
	}()
	if err := client.TimeoutNow("s", server.LocalAddr(), &raft.TimeoutNowRequest{}, new(raft.TimeoutNowResponse)); err != nil {
		t.Fatalf("a request on a new connection: %v", err)
	}
}
