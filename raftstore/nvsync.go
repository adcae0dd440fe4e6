package raftstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// A non-voter's log does not count toward commitment, so its appends need
// not be fsynced for Raft's safety: the log store writes them without
// fdatasync while the latest configuration it knows of says this server is
// a non-voter (DESIGN.md, "Non-voters skip the log's fsync"). Three rules
// keep that safe:
//
//   - Strict unless sure. The store syncs every append unless the latest
//     configuration raft will act on names this server as a Nonvoter.
//     raft acts on the newest configuration in the log, committed or not,
//     and processes a configuration entry right after StoreLogs returns
//     and before it answers the leader; so the store reads configuration
//     entries as they are stored, and a batch that makes this server a
//     voter (or anything it cannot read) is written, and everything
//     written unsynced before it is synced, before StoreLogs returns:
//     before the server acknowledges anything as a voter. A snapshot's
//     configuration (raft hands it to the snapshot store's Create, for
//     its own snapshots and for installed ones) that makes it a voter
//     does the same. Truncating the entry the decision came from (a
//     conflicting suffix; raft falls back to the committed configuration)
//     makes the store strict until the next configuration says otherwise.
//   - A marker file (raft-log/unsynced) exists, durably, before the first
//     unsynced write, and is removed only after everything is synced: on
//     a switch to strict and on Close.
//   - On open, a marker means the last run ended without syncing (a crash
//     or power loss), so the log may be torn anywhere: it is set aside
//     (raft-log.unsynced) and the server starts from its snapshots with an
//     empty log; the leader sends it what it lacks, as to a new server.
//
// The stable store (term, vote) stays synced: it is written only around
// elections.

// unsyncedMarker, inside the log directory, says appends were written
// without fdatasync since the last full sync.
const unsyncedMarker = "unsynced"

// setAsideSuffix names a log directory set aside on open.
const setAsideSuffix = ".unsynced"

// syncPolicy is the log store's knowledge of this server's suffrage, and
// so whether appends are synced. Guarded by logStore.pmu.
type syncPolicy struct {
	self raft.ServerID // empty: always strict
	// lax: appends skip fdatasync. Only ever true while known.
	lax bool
	// known: cfgIndex is the index of the configuration raft acts on now,
	// from a log entry (inLog) or a snapshot.
	known    bool
	inLog    bool
	cfgIndex uint64
	// marked: the marker file exists.
	marked bool
}

// setConfig records the configuration at index as the latest one.
func (p *syncPolicy) setConfig(cfg raft.Configuration, index uint64, inLog bool) {
	p.known, p.inLog, p.cfgIndex = true, inLog, index
	p.lax = p.nonvoterIn(cfg)
}

// forget makes the policy strict until the next configuration it reads.
func (p *syncPolicy) forget() { p.known, p.lax = false, false }

// nonvoterIn reports whether cfg lists this server as a Nonvoter (absent,
// a voter or staging: false).
func (p *syncPolicy) nonvoterIn(cfg raft.Configuration) bool {
	if p.self == "" {
		return false
	}
	for _, s := range cfg.Servers {
		if s.ID == p.self {
			return s.Suffrage == raft.Nonvoter
		}
	}
	return false
}

// noteEntries reads the configuration entries among logs, in order.
func (p *syncPolicy) noteEntries(logs []*raft.Log) {
	for _, lg := range logs {
		switch lg.Type {
		case raft.LogConfiguration:
			cfg, err := decodeConfiguration(lg.Data)
			if err != nil {
				p.forget()
				continue
			}
			p.setConfig(cfg, lg.Index, true)
		case raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
			p.forget()
		}
	}
}

// decodeConfiguration is raft.DecodeConfiguration without its panic.
func decodeConfiguration(data []byte) (cfg raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("raftstore: decode configuration entry: %v", r)
		}
	}()
	return raft.DecodeConfiguration(data), nil
}

// appendLogs writes logs under the policy: synced, or unsynced with the
// marker in place. A batch that ends lax mode also syncs what came before.
func (l *logStore) appendLogs(logs []*raft.Log) error {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	l.policy.noteEntries(logs)
	if !l.policy.lax {
		if err := l.log.storeLogs(logs, true); err != nil {
			return err
		}
		return l.settleLocked()
	}
	if err := l.markLocked(); err != nil {
		return err
	}
	if err := l.log.storeLogs(logs, false); err != nil {
		return err
	}
	l.unsynced.Add(1)
	return nil
}

// deleteRange deletes lo..hi; cutting the log's end through the entry the
// policy rests on makes it strict (raft falls back to the committed
// configuration, which the store does not know).
func (l *logStore) deleteRange(lo, hi uint64) error {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	last, err := l.log.LastIndex()
	if err != nil {
		return err
	}
	if err := l.log.DeleteRange(lo, hi); err != nil {
		return err
	}
	if hi >= last && l.policy.known && l.policy.inLog && lo <= l.policy.cfgIndex {
		l.policy.forget()
		return l.settleLocked()
	}
	return nil
}

// noteSnapshotConfig takes the configuration of a snapshot being created
// (raft's own, or one the leader installs). One that makes this server a
// voter makes the store strict before Create returns; one no older than
// the configuration the store knows of is the latest.
func (l *logStore) noteSnapshotConfig(cfg raft.Configuration, index uint64) error {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	switch {
	case !l.policy.nonvoterIn(cfg):
		if !l.policy.known || index >= l.policy.cfgIndex {
			l.policy.setConfig(cfg, index, false)
		}
		l.policy.lax = false
	case l.policy.known && index >= l.policy.cfgIndex:
		l.policy.setConfig(cfg, index, false)
	}
	return l.settleLocked()
}

// settleLocked, when the store is strict but has unsynced appends, syncs
// them all and removes the marker.
func (l *logStore) settleLocked() error {
	if l.policy.lax || !l.policy.marked {
		return nil
	}
	if err := l.log.syncAll(); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(l.log.dir, unsyncedMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftstore: remove unsynced-log marker: %w", err)
	}
	if err := syncDir(l.log.dir); err != nil {
		return err
	}
	l.policy.marked = false
	return nil
}

// markLocked creates the marker, durably, unless it exists.
func (l *logStore) markLocked() error {
	if l.policy.marked {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(l.log.dir, unsyncedMarker), os.O_WRONLY|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("raftstore: create unsynced-log marker: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("raftstore: create unsynced-log marker: %w", err)
	}
	if err := syncDir(l.log.dir); err != nil {
		return err
	}
	l.policy.marked = true
	return nil
}

// setAsideUnsynced moves the log directory in dir aside when it holds the
// marker, and reports whether it did.
func setAsideUnsynced(dir string) (bool, error) {
	logDir := filepath.Join(dir, logDirName)
	if _, err := os.Stat(filepath.Join(logDir, unsyncedMarker)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("raftstore: check unsynced-log marker: %w", err)
	}
	aside := logDir + setAsideSuffix
	if err := os.RemoveAll(aside); err != nil {
		return false, fmt.Errorf("raftstore: remove old set-aside log: %w", err)
	}
	if err := os.Rename(logDir, aside); err != nil {
		return false, fmt.Errorf("raftstore: set aside unsynced log: %w", err)
	}
	return true, syncDir(dir)
}

// initSyncPolicy sets the policy from what raft will act on when it
// starts: the newest configuration entry in the log after the snapshot
// it restores, else that snapshot's configuration. raft restores the
// newest snapshot that opens, so the store is lax only if every stored
// snapshot would give a Nonvoter configuration.
func (l *logStore) initSyncPolicy(self raft.ServerID, snaps raft.SnapshotStore, log *slog.Logger) error {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	l.policy = syncPolicy{self: self}
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("raftstore: list snapshots: %w", err)
	}
	floor := uint64(0) // entries at or below every snapshot do not count
	for k, m := range metas {
		if k == 0 || m.Index < floor {
			floor = m.Index
		}
	}
	entry, entryIndex, found, err := l.latestConfigEntry(floor)
	if err != nil {
		return err
	}
	type candidate struct {
		cfg   raft.Configuration
		index uint64
		inLog bool
	}
	var cands []candidate
	for _, m := range metas {
		if found && entryIndex > m.Index {
			cands = append(cands, candidate{entry, entryIndex, true})
		} else {
			cands = append(cands, candidate{m.Configuration, m.ConfigurationIndex, false})
		}
	}
	if len(metas) == 0 && found {
		cands = append(cands, candidate{entry, entryIndex, true})
	}
	if len(cands) == 0 {
		return nil
	}
	for _, c := range cands {
		if !l.policy.nonvoterIn(c.cfg) {
			return nil // strict, unknown: the next configuration decides
		}
	}
	l.policy.setConfig(cands[0].cfg, cands[0].index, cands[0].inLog)
	log.Info("raft log appends skip fsync: this server is a non-voter", "config_index", cands[0].index)
	return nil
}

// latestConfigEntry returns the newest configuration entry above floor;
// an unreadable one counts as found with an empty configuration (strict).
func (l *logStore) latestConfigEntry(floor uint64) (raft.Configuration, uint64, bool, error) {
	first, err := l.log.FirstIndex()
	if err != nil {
		return raft.Configuration{}, 0, false, err
	}
	last, err := l.log.LastIndex()
	if err != nil {
		return raft.Configuration{}, 0, false, err
	}
	var lg raft.Log
	for i := last; i >= max(first, floor+1) && i > 0; i-- {
		if err := l.log.GetLog(i, &lg); err != nil {
			return raft.Configuration{}, 0, false, fmt.Errorf("raftstore: read log entry %d: %w", i, err)
		}
		switch lg.Type {
		case raft.LogConfiguration:
			cfg, err := decodeConfiguration(lg.Data)
			if err != nil {
				return raft.Configuration{}, i, true, nil
			}
			return cfg, i, true, nil
		case raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
			return raft.Configuration{}, i, true, nil
		}
	}
	return raft.Configuration{}, 0, false, nil
}

// policySnapshots is raft's snapshot store with Create reporting each
// snapshot's configuration to the log store first.
type policySnapshots struct {
	*raft.FileSnapshotStore
	logs *logStore
}

// Create implements raft.SnapshotStore.
func (s policySnapshots) Create(version raft.SnapshotVersion, index, term uint64, cfg raft.Configuration,
	cfgIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if err := s.logs.noteSnapshotConfig(cfg, cfgIndex); err != nil {
		return nil, err
	}
	return s.FileSnapshotStore.Create(version, index, term, cfg, cfgIndex, trans)
}
