package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// Forwarder sends a follower's write to the leader.
// It is the raftstore.Config.Forwarder hook: raftstore calls Forward on a
// follower and answers with the leader's encoded result when the module
// has a result codec, else waits until its own FSM has applied the
// returned index and answers with the result its own FSM computed (see
// CLUSTER.md).
//
// Writes go on one ForwardStream per leader (fwdstream.go), batched with
// the other writes queued at the same moment; to a leader that does not
// serve the stream (an older version), or with Config.ForwardUnaryOnly,
// each is its own Cluster.Forward call. Both answer alike: the same
// results, errors and retries.
//
// All methods are safe for concurrent use. Close stops the streams and
// releases the connections.
type Forwarder struct {
	cfg      Config
	log      *slog.Logger
	resolver AddrResolver
	leader   atomic.Pointer[LeaderSource]
	pool     *pool

	life context.Context // the streams' parent; Close ends it
	end  context.CancelFunc
	wg   sync.WaitGroup // the streams' goroutines

	mu          sync.Mutex
	streams     map[string]*fwdStream // by node id
	unsupported map[string]time.Time  // node id -> unary calls until then
	closed      bool
}

// NewForwarder returns a Forwarder that maps Raft server ids to gRPC
// addresses through resolver (a *Directory).
func NewForwarder(cfg Config, resolver AddrResolver) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if resolver == nil {
		return nil, fmt.Errorf("%w: Forwarder needs an AddrResolver", ErrInvalidConfig)
	}
	life, end := context.WithCancel(context.Background())
	return &Forwarder{
		cfg: cfg, log: cfg.logger("cluster.forward"), resolver: resolver, pool: newPool(cfg),
		life: life, end: end,
		streams: make(map[string]*fwdStream), unsupported: make(map[string]time.Time),
	}, nil
}

// SetLeaderSource lets Forward re-read the local view of the leader while
// it retries (normally the *raftstore.Store, which can only be built after
// the Forwarder, hence a setter). Without one, Forward learns a new leader
// only from the old leader's NOT_LEADER answers.
func (f *Forwarder) SetLeaderSource(ls LeaderSource) { f.leader.Store(&ls) }

// Close stops the streams and closes the pooled connections; a Forward
// in progress fails (ErrLeadershipLost when it was sent). Idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.end()
	f.wg.Wait()
	return f.pool.close()
}

// Forward sends cmd (1 type byte + protobuf body) to the leader and returns
// the Raft index it was committed at, also when the state module rejected
// it (the follower's FSM computes the same rejection), and the outcome the
// leader encoded, if any. leaderID and
// leaderAddr (the Raft address, unused) are the caller's view of the leader.
//
// It retries, with backoff, while nothing can have been proposed: no
// leader known, a leader unknown to gossip or not reachable, a NOT_LEADER
// or NO_LEADER answer. After Config.ForwardRetryTimeout (or when ctx ends)
// it returns an error matching ErrNoLeader and raftstore.ErrNoLeader.
// When the command may have been proposed it never retries; it returns:
//   - raftstore.ErrLeadershipLost: the leader lost leadership or shut down
//     after proposing, or the connection broke during the call;
//   - raftstore.ErrTimeout (and context.DeadlineExceeded / Canceled): the
//     deadline passed while the leader was working;
//   - raftstore.ErrUnknownCommand / ErrInvalidCommand: the leader refused
//     the bytes (nothing proposed, not retryable).
//
// A DISK_FULL answer (the leader could not write its log; nothing was
// committed) is retried like NO_LEADER; the final error then also matches
// raftstore.ErrDiskFull.
func (f *Forwarder) Forward(ctx context.Context, leaderID, leaderAddr string, cmd []byte) (raftstore.ForwardReply, error) {
	_ = leaderAddr // the gRPC address comes from gossip meta, not the Raft address
	giveUp := time.Now().Add(f.cfg.ForwardRetryTimeout)
	pause := f.cfg.ForwardBackoff
	target, last := leaderID, error(nil)
	if target == "" {
		target = f.localLeader()
	}
	for {
		if ctx.Err() != nil {
			// The caller gave up (a redirect comes back without a pause):
			// nothing may be sent for it any more.
			return raftstore.ForwardReply{}, fmt.Errorf("forward: %w: %w", raftstore.ErrTimeout, ctx.Err())
		}
		reply, next, err, retry := f.attempt(ctx, target, cmd)
		if !retry {
			return reply, err
		}
		last = err
		if next != "" && next != target {
			target = next // redirected: try the new leader at once
			continue
		}
		// Ask the local store again after the pause; without an answer,
		// the same node may well win the election in progress.
		if time.Now().Add(pause).After(giveUp) {
			return raftstore.ForwardReply{}, f.noLeader(last)
		}
		if !sleepCtx(ctx, pause) {
			return raftstore.ForwardReply{}, fmt.Errorf("forward: %w: %w", raftstore.ErrTimeout, ctx.Err())
		}
		pause = min(2*pause, f.cfg.ForwardMaxBackoff)
		if l := f.localLeader(); l != "" {
			target = l
		}
	}
}

func (f *Forwarder) noLeader(last error) error {
	if last == nil {
		return fmt.Errorf("%w: %w", ErrNoLeader, raftstore.ErrNoLeader)
	}
	return fmt.Errorf("%w: %w: last attempt: %w", ErrNoLeader, raftstore.ErrNoLeader, last)
}

func (f *Forwarder) localLeader() string {
	if ls := f.leader.Load(); ls != nil && *ls != nil {
		id, _ := (*ls).Leader()
		return id
	}
	return ""
}

// attempt makes one Forward call to target. retry reports that nothing
// can have been proposed; next is the leader named by a NOT_LEADER answer.
func (f *Forwarder) attempt(ctx context.Context, target string, cmd []byte) (reply raftstore.ForwardReply, next string, err error, retry bool) {
	if target == "" {
		return raftstore.ForwardReply{}, "", errors.New("no leader known"), true
	}
	addr, ok := f.resolver.GRPCAddr(target)
	if !ok {
		return raftstore.ForwardReply{}, "", fmt.Errorf("leader %s has no known gRPC address", target), true
	}
	if f.streamable(target) {
		reply, next, err, retry, fallback := f.streamAttempt(ctx, target, addr, cmd)
		if !fallback {
			return reply, next, err, retry
		}
	}
	cc, err := f.pool.get(target, addr)
	if err != nil {
		return raftstore.ForwardReply{}, "", err, !errors.Is(err, ErrClosed)
	}
	if !waitReady(ctx, cc, f.cfg.DialTimeout) {
		if ctx.Err() != nil {
			return raftstore.ForwardReply{}, "", fmt.Errorf("forward: %w: %w", raftstore.ErrTimeout, ctx.Err()), false
		}
		return raftstore.ForwardReply{}, "", fmt.Errorf("leader %s at %s not reachable", target, addr), true
	}
	actx, cancel := context.WithTimeout(ctx, f.cfg.ForwardAttemptTimeout)
	defer cancel()
	resp, err := concordv1.NewClusterClient(cc).Forward(actx, &concordv1.ForwardRequest{Command: cmd, OriginNodeId: f.cfg.NodeID})
	if err == nil {
		return raftstore.ForwardReply{Index: resp.GetIndex(), Result: resp.GetResult(), HasResult: resp.Result != nil}, "", nil, false
	}
	if ctx.Err() == nil && actx.Err() != nil {
		// The leader did not answer in time (cut off, or overloaded): it may
		// have proposed the command, so this is "outcome unknown", never a
		// retry that could apply it twice.
		return raftstore.ForwardReply{}, "", fmt.Errorf("no answer from leader %s within %v: %w: %w", target,
			f.cfg.ForwardAttemptTimeout, raftstore.ErrLeadershipLost, raftstore.ErrTimeout), false
	}
	next, err, retry = f.classify(ctx, target, err)
	f.log.Debug("forward attempt failed", "leader_id", target, "retry", retry, "err", err)
	return raftstore.ForwardReply{}, next, err, retry
}

// classify turns a failed call into an error and says whether it is safe
// to retry (see Forward).
func (f *Forwarder) classify(ctx context.Context, target string, callErr error) (next string, err error, retry bool) {
	st := status.Convert(callErr)
	if fe := forwardErrorOf(st); fe != nil {
		switch fe.GetReason() {
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_NOT_LEADER:
			return fe.GetLeaderId(), fmt.Errorf("%s is not the leader", target), true
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_NO_LEADER:
			return "", fmt.Errorf("%s knows no leader", target), true
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_DISK_FULL:
			// Nothing was committed and the leader stepped down: another
			// leader may take the command. If none does, the error still
			// names the full disk (noLeader wraps the last attempt).
			return "", fmt.Errorf("forward to %s: %s: %w", target, st.Message(), raftstore.ErrDiskFull), true
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_LEADERSHIP_LOST,
			concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_SHUTDOWN:
			return "", fmt.Errorf("forward to %s: %s: %w", target, st.Message(), raftstore.ErrLeadershipLost), false
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_TIMEOUT:
			return "", fmt.Errorf("forward to %s: %w: %w", target, raftstore.ErrTimeout, context.DeadlineExceeded), false
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_UNKNOWN_COMMAND:
			return "", fmt.Errorf("forward to %s: %s: %w", target, st.Message(), raftstore.ErrUnknownCommand), false
		case concordv1.ForwardErrorReason_FORWARD_ERROR_REASON_INVALID_COMMAND:
			return "", fmt.Errorf("forward to %s: %s: %w", target, st.Message(), raftstore.ErrInvalidCommand), false
		}
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("forward to %s: %w: %w", target, raftstore.ErrTimeout, ctx.Err()), false
	}
	if st.Code() == codes.Unimplemented {
		// The peer runs no Cluster service (yet): the handler never ran.
		return "", fmt.Errorf("forward to %s: %s", target, st.Message()), true
	}
	// A transport failure after the connection was ready: the request may
	// have reached the leader and been proposed, so a retry could apply
	// the command twice.
	return "", fmt.Errorf("forward to %s: outcome unknown: %s: %w", target, st.Message(), raftstore.ErrLeadershipLost), false
}

// forwardErrorOf returns the ForwardError detail of st, if it has one.
func forwardErrorOf(st *status.Status) *concordv1.ForwardError {
	for _, d := range st.Details() {
		if fe, ok := d.(*concordv1.ForwardError); ok {
			return fe
		}
	}
	return nil
}

// sleepCtx pauses for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
