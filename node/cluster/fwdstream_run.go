package cluster

import (
	"fmt"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// streamable reports whether writes to target go on a ForwardStream.
func (f *Forwarder) streamable(target string) bool {
	if f.cfg.ForwardUnaryOnly {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return !time.Now().Before(f.unsupported[target])
}

// markUnsupported sends target's writes with Forward for a while.
func (f *Forwarder) markUnsupported(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unsupported[target] = time.Now().Add(unsupportedRecheck)
}

// streamTo returns the live stream to target at addr, starting one when
// there is none (or the one there is goes to an older address).
func (f *Forwarder) streamTo(target, addr string) (*fwdStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("forward to %s: %w", target, ErrClosed)
	}
	if s := f.streams[target]; s != nil {
		switch {
		case s.addr != addr:
			// The node moved (restart on a new port): its requests
			// fail as on a broken connection.
			s.cancel()
		case !s.isDead():
			return s, nil
		}
		delete(f.streams, target)
	}
	s := newFwdStream(f, target, addr)
	f.streams[target] = s
	f.wg.Add(1)
	go s.run()
	return s, nil
}

// dropStream forgets s, so that the next write starts a new stream.
func (f *Forwarder) dropStream(s *fwdStream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streams[s.target] == s {
		delete(f.streams, s.target)
	}
}

// run is the stream's own goroutine: it opens the gRPC stream, starts
// the receiver, sends what was queued meanwhile, then watches the stream
// until it breaks, goes idle, or the Forwarder closes (s.ctx). Later
// batches are sent by the writers themselves (flush). It always leaves
// the stream failed (fail), so no request waits on a dead one.
func (s *fwdStream) run() {
	defer s.f.wg.Done()
	defer s.cancel()
	stream, err := s.open()
	if err != nil {
		s.fail(err)
		return
	}
	recvDone := make(chan struct{})
	s.f.wg.Add(1)
	go func() { // ends when Recv fails: the stream broke or s.ctx ended
		defer s.f.wg.Done()
		defer close(recvDone)
		s.receive(stream)
	}()
	s.mu.Lock()
	s.stream = stream
	s.mu.Unlock()
	s.flush()
	idle := time.NewTicker(s.f.cfg.ForwardStreamIdleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-recvDone:
			return
		case <-s.ctx.Done():
			<-recvDone // Recv fails with the context; receive fails the rest
			return
		case <-idle.C:
			if s.retire() {
				s.sendMu.Lock() // CloseSend must not run beside a Send
				_ = stream.CloseSend()
				s.sendMu.Unlock()
				s.cancel()
				<-recvDone
				return
			}
		case <-s.sendFailed:
			// The stream is over; Recv returns its status (an old
			// leader's UNIMPLEMENTED, say), which decides how the
			// requests fail. Do not wait forever for it.
			t := time.NewTimer(s.f.cfg.DialTimeout)
			select {
			case <-recvDone:
			case <-t.C:
				s.cancel()
				<-recvDone
			}
			t.Stop()
			return
		}
	}
}

// open connects to the node and opens the stream; nothing is sent yet.
func (s *fwdStream) open() (concordv1.Cluster_ForwardStreamClient, error) {
	cc, err := s.f.pool.get(s.target, s.addr)
	if err != nil {
		return nil, err
	}
	if !waitReady(s.ctx, cc, s.f.cfg.DialTimeout) {
		return nil, fmt.Errorf("leader %s at %s not reachable", s.target, s.addr)
	}
	stream, err := concordv1.NewClusterClient(cc).ForwardStream(s.ctx)
	if err != nil {
		return nil, fmt.Errorf("open forward stream to %s: %w", s.target, err)
	}
	return stream, nil
}

// sendWatchdogFloor is the least time a Send may block before the stream
// is taken for stuck: a CPU-starved host may pause a healthy Send for
// some milliseconds, and breaking the stream fails every write on it.
const sendWatchdogFloor = 500 * time.Millisecond

// flush sends what is queued, in batches, on the caller's goroutine
// (no hand-off to another goroutine on the write's path), unless another
// goroutine is sending: that one sends it after its current batch. Before
// the stream is open, run sends what queued up.
func (s *fwdStream) flush() {
	for {
		if !s.sendMu.TryLock() {
			return
		}
		s.mu.Lock()
		stream := s.stream
		var items []*concordv1.ForwardItem
		var wait time.Duration
		if stream != nil && !s.sendBroken {
			items, wait = s.takeBatch()
		}
		s.mu.Unlock()
		var err error
		if len(items) > 0 {
			// Send blocks while the leader does not read (HTTP/2 flow
			// control): a connection stuck past the batch's first
			// deadline (but never less than sendWatchdogFloor) is
			// broken, as the relay's watchdog has it, and the writer
			// sending is answered (the deadline's error).
			wd := time.AfterFunc(max(wait, sendWatchdogFloor), s.cancel)
			err = stream.Send(&concordv1.ForwardBatch{OriginNodeId: s.f.cfg.NodeID, Items: items})
			wd.Stop()
		}
		s.sendMu.Unlock()
		if err != nil {
			s.f.log.Debug("forward stream send failed", "leader_id", s.target, "err", err)
			s.mu.Lock()
			s.sendBroken, s.dead = true, true // new writes take a new stream
			s.mu.Unlock()
			select {
			case s.sendFailed <- struct{}{}:
			default:
			}
			return
		}
		if len(items) == 0 && !s.sendable() {
			return
		}
	}
}

// sendable reports that something is queued and can be sent now.
func (s *fwdStream) sendable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0 && s.stream != nil && !s.sendBroken
}

// receive is the stream's receiver goroutine: it hands each answer to its
// request until Recv fails, then fails the stream.
func (s *fwdStream) receive(stream concordv1.Cluster_ForwardStreamClient) {
	for {
		rep, err := stream.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		for _, r := range rep.GetReplies() {
			s.complete(r)
		}
	}
}

// retire marks the stream dead and forgets it when nothing came and
// nothing is held since the last check; true when it did.
func (s *fwdStream) retire() bool {
	s.mu.Lock()
	if s.active || len(s.queue) > 0 || len(s.inflight) > 0 {
		s.active = false
		s.mu.Unlock()
		return false
	}
	s.dead = true
	s.mu.Unlock()
	s.f.dropStream(s)
	return true
}

func (s *fwdStream) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}
