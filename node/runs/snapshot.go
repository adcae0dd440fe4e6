package runs

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/consensus"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// snapshotFormat is RunsHeader.format_version; bump it when the record
// layout changes incompatibly.
const snapshotFormat = 1

// runsSnapshot is a point-in-time view. The engine state is mutated in
// place by Step, so it is encoded while the lock is held (that encoding is
// the copy); events are append-only and shared; the rest is copied.
type runsSnapshot struct {
	runs []snapRun
}

type snapRun struct {
	rec    *concordv1.RunRecord // without events
	events []runEvent
}

// Snapshot implements raftstore.Module. It takes the write lock because it
// keeps the encoding of finished runs (run.frozen) for the next snapshot.
func (m *Module) Snapshot() (raftstore.ModuleSnapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap := &runsSnapshot{runs: make([]snapRun, 0, len(m.ids))}
	for _, id := range m.ids {
		r := m.runs[id]
		state := r.frozen
		if state == nil {
			state = consensus.EncodeState(r.st)
			if r.st.Done() {
				r.frozen = state // a finished run never changes again
			}
		}
		rec := &concordv1.RunRecord{
			RunId: r.id, EngineState: state, StartedBy: r.startedBy,
			StartedAtMs: r.startedAt, FinishedAtMs: r.finishedAt, LastAtMs: r.lastAt, StartIndex: r.startIndex,
		}
		timerIDs := make([]string, 0, len(r.timers))
		for tid := range r.timers {
			timerIDs = append(timerIDs, tid)
		}
		sort.Strings(timerIDs)
		for _, tid := range timerIDs {
			t := r.timers[tid]
			rec.Timers = append(rec.Timers, &concordv1.RunTimerRecord{Id: tid, Kind: t.kind, AtMs: t.at})
		}
		for _, t := range r.tasks {
			rec.Tasks = append(rec.Tasks, &concordv1.RunTaskRecord{TaskId: t.id, ParticipantId: t.pid,
				Kind: t.kind, TimeoutAtMs: t.timeoutAt, Outstanding: t.outstanding})
		}
		snap.runs = append(snap.runs, snapRun{rec: rec, events: r.events[:len(r.events):len(r.events)]})
	}
	return snap, nil
}

// Persist writes the header, then one RunsRecord per run.
func (p *runsSnapshot) Persist(write func([]byte) error) error {
	put := func(r *concordv1.RunsRecord) error {
		b, err := proto.Marshal(r)
		if err != nil {
			return fmt.Errorf("marshal runs record: %w", err)
		}
		return write(b)
	}
	if err := put(&concordv1.RunsRecord{Record: &concordv1.RunsRecord_Header{
		Header: &concordv1.RunsHeader{FormatVersion: snapshotFormat}}}); err != nil {
		return err
	}
	for _, sr := range p.runs {
		rec := proto.CloneOf(sr.rec)
		rec.Events = make([]*concordv1.RunEventRecord, len(sr.events))
		for i := range sr.events {
			ev := &sr.events[i]
			rec.Events[i] = &concordv1.RunEventRecord{Seq: ev.seq, AtMs: ev.atMs, At: ev.at, Type: ev.typ,
				PayloadJson: ev.payload, EventId: ev.id}
		}
		if err := put(&concordv1.RunsRecord{Record: &concordv1.RunsRecord_Run{Run: rec}}); err != nil {
			return err
		}
	}
	return nil
}

// Release implements raftstore.ModuleSnapshot; the view holds no resources.
func (p *runsSnapshot) Release() {}

// Restore implements raftstore.Module: it decodes every run into fresh
// values and returns a commit that swaps them in. A subscribed driver is
// told to rescan (its outstanding tasks and timers may have changed).
func (m *Module) Restore(next func() ([]byte, error)) (func(), error) {
	runs := map[string]*run{}
	var ids []string
	header := false
	for {
		b, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read runs record: %w", err)
		}
		var rec concordv1.RunsRecord
		if err := proto.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
		}
		if !header {
			if h := rec.GetHeader(); h == nil || h.GetFormatVersion() != snapshotFormat {
				return nil, fmt.Errorf("%w: missing or unknown header", ErrSnapshotFormat)
			}
			header = true
			continue
		}
		r, err := restoreRun(rec.GetRun())
		if err != nil {
			return nil, err
		}
		if runs[r.id] != nil {
			return nil, fmt.Errorf("%w: duplicate run %s", ErrSnapshotFormat, r.id)
		}
		runs[r.id] = r
		ids = append(ids, r.id)
	}
	if !header {
		return nil, fmt.Errorf("%w: missing header", ErrSnapshotFormat)
	}
	slices.Sort(ids)
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.runs, m.ids = runs, ids
		if m.out != nil {
			m.out.mu.Lock()
			m.out.items, m.out.overflow = nil, true
			m.out.mu.Unlock()
			m.out.wake()
		}
		m.wake()
	}, nil
}

// restoreRun rebuilds one run, including the fields Apply derives.
func restoreRun(rec *concordv1.RunRecord) (*run, error) {
	if rec == nil || rec.GetRunId() == "" {
		return nil, fmt.Errorf("%w: record without a run", ErrSnapshotFormat)
	}
	st, err := consensus.DecodeState(rec.GetEngineState())
	if err != nil {
		return nil, fmt.Errorf("%w: run %s: %w", ErrSnapshotFormat, rec.GetRunId(), err)
	}
	if st.SessionID() != rec.GetRunId() {
		return nil, fmt.Errorf("%w: run %s holds state of %s", ErrSnapshotFormat, rec.GetRunId(), st.SessionID())
	}
	r := newRun(rec.GetRunId(), st, rec.GetStartedBy(), rec.GetStartedAtMs(), rec.GetStartIndex())
	r.finishedAt, r.lastAt = rec.GetFinishedAtMs(), rec.GetLastAtMs()
	for _, t := range rec.GetTimers() {
		r.timers[t.GetId()] = timerEntry{kind: t.GetKind(), at: t.GetAtMs()}
	}
	for _, t := range rec.GetTasks() {
		te := &taskEntry{id: t.GetTaskId(), pid: t.GetParticipantId(), kind: t.GetKind(),
			timeoutAt: t.GetTimeoutAtMs(), outstanding: t.GetOutstanding()}
		r.tasks = append(r.tasks, te)
		r.taskByID[te.id] = te
	}
	r.events = make([]runEvent, 0, len(rec.GetEvents()))
	for _, e := range rec.GetEvents() {
		r.events = append(r.events, runEvent{seq: e.GetSeq(), atMs: e.GetAtMs(), at: e.GetAt(), typ: e.GetType(),
			payload: e.GetPayloadJson(), id: e.GetEventId()})
		r.observe(&r.events[len(r.events)-1])
	}
	r.failure = st.Failure()
	r.result = st.Result()
	if st.Done() {
		r.frozen = rec.GetEngineState()
	}
	return r, nil
}
