package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logCacheEntries is how many recent log entries are kept in memory so
// replication to followers rarely reads the log store (a pread per
// entry). A non-voter paced at the background interval (pace.go) is sent
// everything appended in that interval at once: 1,024 entries cover 100
// ms at 10,000 writes/s, where 512 left a third of each such append at
// 6,800 writes/s to be read back from disk (TestLogCacheCoversABackgroundInterval).
const logCacheEntries = 1024

// Store is one raft server with its replicated FSM. All methods are safe
// for concurrent use. A Store is created with New, made part of a cluster
// with BootstrapSelf, BootstrapCluster or a leader's AddVoter, and ends with
// Shutdown; it owns its raft instance, transport, stores and goroutines.
type Store struct {
	id  string
	cfg Config
	log *slog.Logger
	fsm *fsm

	raft  *raft.Raft
	trans *raftTransport
	layer *trackingLayer
	bolt  *logStore
	early *earlyAppender // nil with Config.NoEarlyAppend

	// testHookLogWritten, when set, runs after each log append's write,
	// before its fsync (logWritten).
	testHookLogWritten atomic.Pointer[func(logs []*raft.Log)]

	observer *raft.Observer
	obsCh    chan raft.Observation

	// mu guards closing. Operations that wait on raft are admitted under
	// RLock (so inflight.Add never races inflight.Wait in Shutdown).
	mu       sync.RWMutex
	closing  bool
	inflight sync.WaitGroup // admitted operations still running
	futures  sync.WaitGroup // goroutines waiting on raft futures

	stopCh       chan struct{} // closed when Shutdown begins
	raftDown     chan struct{} // closed once raft has shut down
	shutdownDone chan struct{} // closed when Shutdown has finished
	shutdownErr  error         // written before shutdownDone is closed
	graceCut     bool          // Shutdown cut the transport to stop raft (dialcut.go); set before shutdownDone
	bg           sync.WaitGroup
	nudgeCh      chan struct{} // 1 slot: a commit index to propagate (nudge.go)
	nudgeNowCh   chan struct{} // 1 slot: ... and an origin waits for it
	hurryCh      chan struct{} // 1 slot: a follower wants the commit index (hurry.go)

	// subsMu guards subs, isLeader and leaderChg (leadership.go). Lock
	// order: subsMu is never held while taking mu.
	subsMu    sync.Mutex
	subs      map[*subscriber]struct{}
	isLeader  bool
	leaderChg chan struct{} // closed and replaced on every leader change

	// testHookBeforeApply, for tests: called by propose after its leader
	// check and before raft.Apply, to move leadership inside that window.
	// Set before the Store is used; never changed afterwards.
	testHookBeforeApply func()
}

// New opens (or creates) the raft state in cfg.DataDir, restores the latest
// snapshot into the modules, starts the transport and raft, and returns.
// It does not bootstrap: call BootstrapSelf or BootstrapCluster on a new
// cluster, or have the leader AddVoter this server. On an existing DataDir
// the server rejoins with its stored configuration.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		id:           cfg.NodeID,
		cfg:          cfg,
		log:          logger.With("component", "raftstore", "node_id", cfg.NodeID),
		stopCh:       make(chan struct{}),
		raftDown:     make(chan struct{}),
		shutdownDone: make(chan struct{}),
		subs:         make(map[*subscriber]struct{}),
		nudgeCh:      make(chan struct{}, 1),
		nudgeNowCh:   make(chan struct{}, 1),
		hurryCh:      make(chan struct{}, 1),
	}
	var err error
	if s.fsm, err = newFSM(cfg.Modules, s.log); err != nil {
		return nil, err
	}
	s.fsm.observe = cfg.ObserveApply
	if cfg.MaxLogEntries > 0 {
		s.fsm.logCap = newLogCap(cfg.MaxLogEntries)
	}
	if err := s.open(); err != nil {
		s.closeResources()
		return nil, err
	}
	s.startLeadershipLoop()
	s.startLogCap()
	s.startNudger()
	s.startHurrier()
	s.log.Info("raft store started", "addr", s.Addr())
	return s, nil
}

// open runs the setup steps in order; on error, closeResources undoes
// whatever was opened.
func (s *Store) open() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("raftstore: create data dir: %w", err)
	}
	var err error
	if s.bolt, err = openLogStore(s.cfg.DataDir); err != nil {
		return err
	}
	s.bolt.fault = s.cfg.LogWriteFault
	if s.bolt.setAside {
		s.log.Warn("raft log was written unsynced and the server did not stop cleanly: set it aside, starting from the snapshots",
			"dir", filepath.Join(s.cfg.DataDir, logDirName+setAsideSuffix))
	}
	rlog := newHCLogAdapter(s.log, "raft")
	snaps, err := openSnapshotStore(s.cfg, rlog)
	if err != nil {
		return err
	}
	if err := s.bolt.initSyncPolicy(raft.ServerID(s.cfg.NodeID), snaps, s.log); err != nil {
		return err
	}
	if s.trans, s.layer, err = newTransport(s.cfg, rlog.Named("net").(*hclogAdapter), s.stopCh); err != nil {
		return fmt.Errorf("raftstore: transport: %w", err)
	}
	logs, err := raft.NewLogCache(logCacheEntries, s.bolt)
	if err != nil {
		return fmt.Errorf("raftstore: log cache: %w", err)
	}
	rc := s.cfg.raftConfig(rlog)
	if !s.cfg.NoEarlyAppend {
		s.early = s.newEarlyAppender(rc.ProtocolVersion)
		s.trans.early = s.early
	}
	s.bolt.log.written = s.logWritten
	if s.raft, err = raft.NewRaft(rc, batchingFSM{s.fsm}, logs, s.bolt, policySnapshots{snaps, s.bolt}, s.trans); err != nil {
		if herr := s.fsm.halt.cause(); herr != nil {
			return fmt.Errorf("raftstore: start raft: restore the snapshot: %w", herr)
		}
		return fmt.Errorf("raftstore: start raft: %w", err)
	}
	if s.early != nil {
		s.early.r.Store(s.raft)
	}
	s.trans.pace.setConfigSource(s.raft)
	return nil
}

func openSnapshotStore(cfg Config, logger *hclogAdapter) (*raft.FileSnapshotStore, error) {
	st, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, cfg.RetainSnapshots, logger.Named("snapshot"))
	if err != nil {
		return nil, fmt.Errorf("raftstore: open snapshot store: %w", err)
	}
	return st, nil
}

// closeResources releases what open acquired, in reverse order. raft's
// shutdown future closes the transport; the explicit Close covers a failed
// NewRaft and closes accepted connections raft leaves open.
func (s *Store) closeResources() {
	if s.raft != nil {
		_ = s.raft.Shutdown().Error()
	}
	if s.trans != nil {
		_ = s.trans.Close()
		s.trans.CloseStreams()
		_ = s.layer.Close()
		s.layer.handlers().Wait() // they end once their connections close
	}
	if s.bolt != nil {
		if err := s.bolt.Close(); err != nil {
			s.log.Warn("close log store", "err", err)
		}
	}
}

// ID returns this server's raft ID (Config.NodeID).
func (s *Store) ID() string { return s.id }

// Addr returns the raft transport address peers use to reach this server
// (the advertised address; with port 0 in BindAddr, the port picked).
func (s *Store) Addr() string { return string(s.trans.LocalAddr()) }

// enter admits an operation unless Shutdown has begun; a nil return must
// be paired with leave.
func (s *Store) enter() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closing {
		return ErrShutdown
	}
	s.inflight.Add(1)
	return nil
}

func (s *Store) leave() { s.inflight.Done() }

// Shutdown stops the Store. Order, and why:
//  1. refuse new operations (they get ErrShutdown);
//  2. wait, within ctx, for admitted operations to finish: raft resolves
//     their futures while it runs, but abandons futures still queued for
//     its FSM goroutine once it shuts down, and a waiter on one of those
//     would never return;
//  3. shut raft down and wait for its goroutines (this also closes the
//     transport's listener); if raft has not stopped within shutdownGrace
//     (an RPC to a frozen peer holds a goroutine), cut the transport's
//     dialled connections and refuse new dials (dialcut.go);
//  4. release any caller still waiting (ErrShutdown) and close the pooled,
//     dialled and accepted connections, so no transport goroutine lingers;
//  5. stop the leadership goroutine and close subscribers' channels;
//  6. wait for the accepted connections' handlers to return (raft answers
//     heartbeats there and writes the term to bolt), then close the bolt
//     store last.
//
// Shutdown is idempotent: later calls wait for the first to finish and
// return its result. Leadership is not handed off here; call
// LeadershipTransfer first for a graceful leader exit. If ctx ends during
// step 2, Shutdown proceeds and returns an error matching ErrTimeout.
func (s *Store) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closing
	s.closing = true
	s.mu.Unlock()
	if !first {
		select {
		case <-s.shutdownDone:
			return s.shutdownErr
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
	defer close(s.shutdownDone)
	close(s.stopCh)
	s.log.Info("raft store shutting down")

	drainErr := waitGroupCtx(ctx, &s.inflight)
	if drainErr == nil {
		drainErr = waitGroupCtx(ctx, &s.futures)
	}
	if drainErr != nil {
		drainErr = fmt.Errorf("raftstore: in-flight operations did not finish: %w", drainErr)
	}
	s.raft.DeregisterObserver(s.observer)
	raftErr := s.shutdownRaft() // dialcut.go: bounded toward a frozen peer
	close(s.raftDown)
	s.trans.CloseStreams()
	// Connections still in use, by an RPC raft abandoned (a leadership
	// transfer's TimeoutNow runs outside raft's goroutines), end now.
	s.layer.dials.cutAll()
	_ = s.layer.Close()
	s.bg.Wait()
	s.closeSubscribers()
	// raft answers heartbeats on the transport's connection goroutines and
	// writes the term to bolt there; bolt may close only once they are gone.
	// Their connections are closed, so they end within milliseconds; the
	// bound does not use ctx, which may already have expired in step 2.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.TransportTimeout)
	defer cancel()
	var boltErr error
	if err := waitGroupCtx(hctx, s.layer.handlers()); err != nil {
		boltErr = fmt.Errorf("raftstore: connections still being served, log store left open: %w", err)
	} else if err := s.bolt.Close(); err != nil {
		boltErr = fmt.Errorf("raftstore: close log store: %w", err)
	}
	s.shutdownErr = errors.Join(drainErr, raftErr, boltErr)
	s.log.Info("raft store shut down")
	return s.shutdownErr
}

// waitGroupCtx waits for wg or ctx. On ctx expiry the helper goroutine
// stays until wg finishes, which Shutdown guarantees happens once raft is
// down (every waiter also watches raftDown).
func waitGroupCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}
