package cluster

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/concordmap/concord/federation/connclose"
)

// A graceful stop and frozen peers.
//
// GracefulStop waits for the RPCs in progress and then for every
// connection to close. gRPC closes a connection with no RPC only after
// the peer acknowledged the ping sent with its first GOAWAY, or after 5 s:
// a peer that froze with its connection open (SIGSTOP, a hung process)
// holds the stop those 5 s, and one whose socket is full longer. Shutdown
// therefore tells the two apart: it waits for the RPCs in progress (up to
// ctx, as before), and once none runs it gives the connections
// connclose.Grace to close (a live peer answers the ping in a round trip)
// and then stops hard, which cuts only connections with nothing running.

// handlerCount counts the RPC handlers running, through interceptors.
type handlerCount struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n is 0
}

func (h *handlerCount) enter() {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
}

func (h *handlerCount) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n--; h.n == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// idleCh returns a channel closed once no handler runs (already closed
// when none does now).
func (h *handlerCount) idleCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	return h.idle
}

func (h *handlerCount) running() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n > 0
}

func (h *handlerCount) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	h.enter()
	defer h.leave()
	return next(ctx, req)
}

func (h *handlerCount) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	h.enter()
	defer h.leave()
	return next(srv, ss)
}

// awaitGraceful waits for graceful (GracefulStop returned), for ctx, or
// for connclose.Grace after the last handler returned. It reports
// whether the graceful stop finished; the caller stops hard otherwise.
func (s *Server) awaitGraceful(ctx context.Context, graceful <-chan struct{}) bool {
	for {
		select {
		case <-graceful:
			return true
		case <-ctx.Done():
			return false
		case <-s.handlers.idleCh():
		}
		grace := time.NewTimer(connclose.Grace)
		select {
		case <-graceful:
			grace.Stop()
			return true
		case <-ctx.Done():
			grace.Stop()
			return false
		case <-grace.C:
		}
		if !s.handlers.running() {
			s.log.Debug("graceful stop: connections still open with no RPC running, closing them", "grace", connclose.Grace)
			return false
		}
		// An RPC started meanwhile (gRPC still takes streams until its
		// second GOAWAY): wait for it too.
	}
}
