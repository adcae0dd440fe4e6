package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// SnapshotStore is what the Snapshots service needs from the local Raft
// store. Implemented by *raftstore.Store.
type SnapshotStore interface {
	SaveSnapshot(ctx context.Context, w io.Writer, opts raftstore.SaveOptions) (raftstore.SnapshotInfo, error)
	RestoreSnapshot(ctx context.Context, r io.Reader) (raftstore.SnapshotInfo, uint64, error)
}

// snapshotChunkBytes is the size of one SnapshotChunk, far below the gRPC
// message limit.
const snapshotChunkBytes = 256 << 10

// ServeSnapshots registers the operator's Snapshots service (admin
// methods: save and restore) backed by store, labelling saved files with
// labels. Call it before Serve, at most once.
func (s *Server) ServeSnapshots(store SnapshotStore, labels raftstore.SaveOptions) {
	concordv1.RegisterSnapshotsServer(s.grpc, &snapshotService{s: s, store: store, labels: labels})
}

// snapshotService implements concordv1.SnapshotsServer: the leader saves
// and restores; a follower passes the call on to the leader once.
type snapshotService struct {
	concordv1.UnimplementedSnapshotsServer
	s      *Server
	store  SnapshotStore
	labels raftstore.SaveOptions
}

// Save streams a snapshot file of the leader's state. Passed on to the
// leader, the call keeps the operator's marker and token (passOnAdmin).
func (v *snapshotService) Save(req *concordv1.SnapshotsSaveRequest, stream concordv1.Snapshots_SaveServer) error {
	ctx := stream.Context()
	if !v.s.isLeader() && !req.GetForwarded() {
		cc, err := v.s.leaderConn()
		if err != nil {
			return err
		}
		up, err := concordv1.NewSnapshotsClient(cc).Save(passOnAdmin(ctx), &concordv1.SnapshotsSaveRequest{Forwarded: true})
		if err != nil {
			return err
		}
		for {
			chunk, err := up.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := stream.Send(chunk); err != nil {
				return err
			}
		}
	}
	w := &chunkWriter{send: stream.Send, buf: make([]byte, 0, snapshotChunkBytes)}
	info, err := v.store.SaveSnapshot(ctx, w, v.labels)
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		return snapshotStatus(v.s, fmt.Errorf("save snapshot: %w", err))
	}
	v.s.log.Info("snapshot saved by request", "index", info.Index, "term", info.Term, "bytes", info.Size)
	return nil
}

// Restore replaces the system's state with the streamed snapshot file.
func (v *snapshotService) Restore(stream concordv1.Snapshots_RestoreServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "empty snapshot stream")
	}
	if err != nil {
		return err
	}
	if !v.s.isLeader() && !first.GetForwarded() {
		return v.forwardRestore(ctx, first, stream)
	}
	r := &chunkReader{recv: stream.Recv, buf: first.GetData()}
	info, idx, err := v.store.RestoreSnapshot(ctx, r)
	if err != nil {
		return snapshotStatus(v.s, err)
	}
	v.s.log.Warn("snapshot restored by request", "index", info.Index, "term", info.Term, "restored_index", idx)
	return stream.SendAndClose(&concordv1.SnapshotsRestoreResponse{Index: info.Index, Term: info.Term, RestoredIndex: idx})
}

// forwardRestore relays a Restore stream to the leader.
func (v *snapshotService) forwardRestore(ctx context.Context, first *concordv1.SnapshotChunk, stream concordv1.Snapshots_RestoreServer) error {
	cc, err := v.s.leaderConn()
	if err != nil {
		return err
	}
	up, err := concordv1.NewSnapshotsClient(cc).Restore(passOnAdmin(ctx))
	if err != nil {
		return err
	}
	chunk := &concordv1.SnapshotChunk{Data: first.GetData(), Forwarded: true}
	for {
		if err := up.Send(chunk); err != nil {
			// The leader ended the call; CloseAndRecv reports why.
			break
		}
		chunk, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	resp, err := up.CloseAndRecv()
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

// isLeader reports whether the local store is the Raft leader.
func (s *Server) isLeader() bool {
	id, _ := s.deps.Store.Leader()
	return id != "" && id == s.deps.Store.ID()
}

// leaderConn returns a connection to the leader's gRPC port.
func (s *Server) leaderConn() (grpc.ClientConnInterface, error) {
	id, _ := s.deps.Store.Leader()
	if id == "" {
		return nil, status.Error(codes.Unavailable, "no raft leader: retry once one is elected")
	}
	return s.PeerConn(id)
}

// snapshotStatus maps a snapshot error to a gRPC status: a file this binary
// cannot read is the caller's problem, anything else a store error.
func snapshotStatus(s *Server, err error) error {
	switch {
	case errors.Is(err, raftstore.ErrUnsupportedVersion):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, raftstore.ErrCorruptSnapshotFile), errors.Is(err, raftstore.ErrBadSnapshot):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return s.storeStatus(err)
}

// chunkWriter turns a byte stream into SnapshotChunk messages.
type chunkWriter struct {
	send func(*concordv1.SnapshotChunk) error
	buf  []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	// Send marshals before it returns, so the buffer can be reused.
	err := w.send(&concordv1.SnapshotChunk{Data: w.buf})
	w.buf = w.buf[:0]
	return err
}

// chunkReader reads the bytes of a stream of SnapshotChunk messages.
type chunkReader struct {
	recv func() (*concordv1.SnapshotChunk, error)
	buf  []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		chunk, err := r.recv()
		if err != nil {
			return 0, err // io.EOF at the end of the stream
		}
		r.buf = chunk.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
