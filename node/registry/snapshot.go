package registry

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// snapshotFormat is RegistryHeader.format_version; bump it when the record
// layout changes incompatibly.
const snapshotFormat = 1

// regSnapshot is a point-in-time view: entries are copy-on-write, so
// holding the pointers is enough; nothing is encoded until Persist.
type regSnapshot struct {
	agents   []*agentEntry
	scopes   []*Scope
	sessions []*sessionEntry
	events   []Event
	last     uint64
	level    uint32 // the recorded system FSM level
	drains   []DrainAdmission
	admitIdx uint64 // the last DRAIN_ADMIT's index
}

// Snapshot implements raftstore.Module: it copies the map values and the
// event window under the read lock and returns.
func (s *State) Snapshot() (raftstore.ModuleSnapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.d
	snap := &regSnapshot{
		events:   d.events.all(),
		last:     d.events.last,
		level:    d.systemLevel,
		drains:   sortedDrains(d.drains),
		admitIdx: d.drainAdmitIndex,
	}
	for _, id := range sortedKeys(d.agents) {
		snap.agents = append(snap.agents, d.agents[id])
	}
	for _, id := range sortedKeys(d.scopes) {
		snap.scopes = append(snap.scopes, d.scopes[id])
	}
	for _, id := range sortedKeys(d.sessions) {
		snap.sessions = append(snap.sessions, d.sessions[id])
	}
	return snap, nil
}

// Persist writes the header, then agents, scopes, sessions (with their
// subscriptions) and events, each as one RegistryRecord. Every record is
// encoded into one reused buffer (write keeps no record), and the events,
// the bulk of a snapshot, into one reused record.
func (p *regSnapshot) Persist(write func([]byte) error) error {
	var buf []byte
	put := func(r *concordv1.RegistryRecord) error {
		var err error
		buf, err = proto.MarshalOptions{}.MarshalAppend(buf[:0], r)
		if err != nil {
			return fmt.Errorf("marshal registry record: %w", err)
		}
		return write(buf)
	}
	if err := put(&concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Header{Header: &concordv1.RegistryHeader{
		FormatVersion: snapshotFormat, LastPosition: p.last, FsmLevel: p.level,
		DrainAdmissions: drainRecords(p.drains), DrainAdmitIndex: p.admitIdx,
	}}}); err != nil {
		return err
	}
	for _, e := range p.agents {
		r := AgentRecord(&e.a)
		r.StateBeforeOrphan, r.PersistentId = e.stateBeforeOrphan, e.persistentID
		if err := put(&concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Agent{Agent: r}}); err != nil {
			return err
		}
	}
	for _, sc := range p.scopes {
		if err := put(&concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Scope{Scope: ScopeRecord(sc)}}); err != nil {
			return err
		}
	}
	for _, e := range p.sessions {
		if err := put(&concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Session{Session: sessionRecord(e)}}); err != nil {
			return err
		}
	}
	ev := &concordv1.EventRecord{}
	rec := &concordv1.RegistryRecord{Record: &concordv1.RegistryRecord_Event{Event: ev}}
	var data []byte // lazy payloads rendered (lazydata.go), one buffer for all
	for i := range p.events {
		setEventRecord(ev, &p.events[i])
		if p.events[i].lazyData() {
			data = p.events[i].appendData(data[:0])
			ev.Data = data
		}
		if err := put(rec); err != nil {
			return err
		}
	}
	return nil
}

// Release implements raftstore.ModuleSnapshot; the view holds no resources.
func (p *regSnapshot) Release() {}

// Restore implements raftstore.Module: it decodes into a fresh data value
// and returns a commit that swaps it in and wakes Notify waiters (the event
// log may have jumped).
func (s *State) Restore(next func() ([]byte, error)) (func(), error) {
	nd := newData(s.window)
	header := false
	var events []Event
	for {
		b, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read registry record: %w", err)
		}
		var rec concordv1.RegistryRecord
		if err := proto.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
		}
		if !header {
			h := rec.GetHeader()
			if h == nil || h.GetFormatVersion() != snapshotFormat {
				return nil, fmt.Errorf("%w: missing or unknown header", ErrSnapshotFormat)
			}
			// A snapshot from before the record has no level: 0.
			if err := s.levelFits(h.GetFsmLevel()); err != nil {
				return nil, err
			}
			nd.events.last, nd.systemLevel = h.GetLastPosition(), h.GetFsmLevel()
			// A snapshot from before drain admissions has none.
			if nd.drains, err = drainsFromRecords(h.GetDrainAdmissions()); err != nil {
				return nil, err
			}
			nd.drainAdmitIndex = h.GetDrainAdmitIndex()
			header = true
			continue
		}
		if err := restoreRecord(nd, &rec, &events); err != nil {
			return nil, err
		}
	}
	if !header {
		return nil, fmt.Errorf("%w: no header", ErrSnapshotFormat)
	}
	if err := restoreEvents(nd, events); err != nil {
		return nil, err
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		// Any session may have moved or detached.
		nd.moves, nd.detaches = s.d.moves+1, s.d.detaches+1
		s.d = nd
		s.wake()
	}, nil
}

func restoreRecord(nd *data, rec *concordv1.RegistryRecord, events *[]Event) error {
	switch r := rec.GetRecord().(type) {
	case *concordv1.RegistryRecord_Agent:
		a := agentFromRecord(r.Agent)
		nd.putAgent(&agentEntry{a: a, stateBeforeOrphan: r.Agent.GetStateBeforeOrphan(), persistentID: r.Agent.GetPersistentId()})
	case *concordv1.RegistryRecord_Scope:
		sc := scopeFromRecord(r.Scope)
		nd.scopes[sc.ID] = &sc
	case *concordv1.RegistryRecord_Session:
		nd.putSession(&sessionEntry{
			s:         sessionFromRecord(r.Session),
			epoch:     r.Session.GetEpoch(),
			ttlMs:     r.Session.GetTtlMs(),
			graceDone: r.Session.GetGraceDone(),
		})
	case *concordv1.RegistryRecord_Event:
		*events = append(*events, eventFromRecord(r.Event))
	default:
		return fmt.Errorf("%w: unexpected record %T", ErrSnapshotFormat, r)
	}
	return nil
}

// restoreEvents checks that the window is dense and ends at the header's
// last position, then keeps the newest EventWindow of them.
func restoreEvents(nd *data, events []Event) error {
	l := &nd.events
	if len(events) == 0 {
		return nil
	}
	if uint64(len(events)) > l.last {
		return fmt.Errorf("%w: %d events but last position %d", ErrSnapshotFormat, len(events), l.last)
	}
	first := l.last - uint64(len(events)) + 1
	for i := range events {
		if events[i].Position != first+uint64(i) {
			return fmt.Errorf("%w: event positions not dense at %d", ErrSnapshotFormat, events[i].Position)
		}
	}
	l.restore(events)
	return nil
}
