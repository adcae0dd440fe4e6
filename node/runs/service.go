package runs

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/concordmap/concord/node/router"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// MethodFunc is the signature of the MAP extension methods; it is
// identical to mapsvc.MethodFunc (an alias there), so Methods' map can be
// given to mapsvc.Config.ExtensionMethods as is.
type MethodFunc = func(ctx context.Context, from router.Sender, params json.RawMessage) (any, error)

// Service is the node-side face of the runs module: the MAP extension
// methods (x-concord/runs/*), the reply endpoint for map/send addressed to
// "concord.runs" (HandleSend, a router.LocalService), and Run, which
// drives runs while this node leads. Methods and HandleSend are safe for
// concurrent use; Run is called once, by the owner.
type Service struct {
	cfg     ServiceConfig
	mod     *Module
	log     *slog.Logger
	entropy io.Reader // locked monotonic ULID entropy
}

// NewService validates cfg and builds the Service.
func NewService(cfg ServiceConfig) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Service{
		cfg:     cfg,
		mod:     cfg.Module,
		log:     lg.With("component", "runs", "node_id", cfg.NodeID),
		entropy: &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(rand.Reader, 0)},
	}, nil
}

// Methods returns the MAP extension methods by name, for
// mapsvc.Config.ExtensionMethods.
func (s *Service) Methods() map[string]MethodFunc {
	return map[string]MethodFunc{
		MethodStart:  s.start,
		MethodGet:    s.get,
		MethodList:   s.list,
		MethodCancel: s.cancel,
	}
}

// Run drives runs while this node is the raft leader: it starts a driver
// when leadership is gained and stops it (waiting for every goroutine it
// started) when leadership is lost or ctx ends. It returns ctx.Err() when
// ctx ends, or nil when the leadership channel closes (the store shut
// down). Call it once, from a goroutine the caller owns.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Messenger == nil || s.cfg.Leadership == nil {
		return errors.New("runs: Run needs ServiceConfig.Messenger and Leadership")
	}
	ch, unsubscribe := s.cfg.Leadership.SubscribeLeadership()
	defer unsubscribe()
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case leader, ok := <-ch:
			switch {
			case !ok:
				return nil
			case leader && stop == nil:
				stop = s.startDriver(ctx)
			case !leader && stop != nil:
				stop()
				stop = nil
			}
		}
	}
}

// startDriver runs one driver and the retention reaper until the returned
// stop is called.
func (s *Service) startDriver(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	d := s.newDriver()
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		s.reap(ctx)
	}()
	go func() {
		defer close(done)
		d.run(ctx)
		<-reaped
	}()
	return func() {
		cancel()
		<-done
	}
}

func (s *Service) newDriver() *driver {
	return newDriver(s.mod, s.cfg.Messenger, s.cfg.Store, driverConfig{
		nodeID:         s.cfg.NodeID,
		now:            s.cfg.Clock,
		retryMin:       s.cfg.RetryMin,
		retryMax:       s.cfg.RetryMax,
		sendTimeout:    s.cfg.SendTimeout,
		proposeTimeout: s.cfg.ProposeTimeout,
		maxSleep:       s.cfg.TimerCheckInterval,
		resendInterval: s.cfg.ResendInterval,
	}, s.log)
}

func (s *Service) nowMs() int64 { return s.cfg.Clock().UnixMilli() }

func (s *Service) newID() string {
	return ulid.MustNew(uint64(max(s.nowMs(), 0)), s.entropy).String()
}

// input starts a RUN_INPUT proposed by this node now.
func (s *Service) input(runID, source string) *concordv1.RunInput {
	return &concordv1.RunInput{RunId: runID, TimeMs: s.nowMs(), NodeId: s.cfg.NodeID, Source: source}
}

// propose checks in against the local replica, proposes it, and waits
// until this node has applied it (with WaitApplied). The check refuses
// without writing anything; on a follower the caller has already waited
// out replication lag (see awaitKnown).
func (s *Service) propose(ctx context.Context, in *concordv1.RunInput) (*Applied, error) {
	if err := s.mod.Check(in); err != nil {
		return nil, err
	}
	res, index, err := s.cfg.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_RUN_INPUT, in)
	if err != nil {
		return nil, err
	}
	if s.cfg.WaitApplied != nil {
		if err := s.cfg.WaitApplied(ctx, index); err != nil {
			return nil, err
		}
	}
	a, _ := res.(*Applied)
	return a, nil
}

// awaitKnown re-runs lookup until it stops failing with a "not known here"
// error or LagWait passes. Only followers wait: their replica may not have
// applied the start or the dispatch the caller already saw; on the leader
// the replica is current and the answer is final.
func (s *Service) awaitKnown(ctx context.Context, lookup func() error) error {
	err := lookup()
	if err == nil || !lagging(err) || s.cfg.IsLeader() || s.cfg.LagWait == 0 {
		return err
	}
	timer := time.NewTimer(s.cfg.LagWait)
	defer timer.Stop()
	for {
		changed := s.mod.changed()
		if err = lookup(); err == nil || !lagging(err) {
			return err
		}
		select {
		case <-changed:
		case <-timer.C:
			return err
		case <-ctx.Done():
			return err
		}
	}
}

// lagging reports whether err could be caused by a replica that is behind:
// an unknown run or task. Settled tasks and finished runs stay so.
func lagging(err error) bool {
	var de *Error
	if !errors.As(err, &de) {
		return false
	}
	if de.Code == CodeRunNotFound {
		return true
	}
	return de.Code == CodeTaskUnknown && de.Details["reason"] == ReasonUnknownTask
}
