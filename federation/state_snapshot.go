package federation

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Snapshot captures the state as records, sorted (links, tokens, imported
// directories, outboxes, inboxes, pending unlinks, staged directory
// chunks, each by key) so equal states give equal snapshots. The
// records are clones: Apply may continue while they are written.
func (s *State) Snapshot() []*concordv1.FedSnapshotRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*concordv1.FedSnapshotRecord
	for _, k := range sortedKeys(s.links) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Link{Link: proto.CloneOf(s.links[k])}})
	}
	for _, k := range sortedKeys(s.tokens) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Token{Token: proto.CloneOf(s.tokens[k])}})
	}
	for _, k := range sortedKeys(s.imported) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Imported{Imported: proto.CloneOf(s.imported[k])}})
	}
	for _, k := range sortedKeys(s.outbox) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Outbox{Outbox: proto.CloneOf(s.outbox[k])}})
	}
	for _, k := range sortedKeys(s.inbox) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Inbox{Inbox: proto.CloneOf(s.inbox[k])}})
	}
	for _, k := range sortedKeys(s.pending) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_PendingUnlink{PendingUnlink: proto.CloneOf(s.pending[k])}})
	}
	for _, k := range sortedKeys(s.staging) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Staging{Staging: proto.CloneOf(s.staging[k])}})
	}
	for _, k := range sortedKeys(s.gateways) {
		out = append(out, &concordv1.FedSnapshotRecord{Record: &concordv1.FedSnapshotRecord_Gateway{Gateway: proto.CloneOf(s.gateways[k])}})
	}
	return out
}

// PersistSnapshot encodes records, one write per record.
func PersistSnapshot(recs []*concordv1.FedSnapshotRecord, write func([]byte) error) error {
	for _, r := range recs {
		b, err := proto.Marshal(r)
		if err != nil {
			return fmt.Errorf("federation: encode snapshot record: %w", err)
		}
		if err := write(b); err != nil {
			return err
		}
	}
	return nil
}

// Restore decodes records (next returns io.EOF after the last) into new
// state and returns a commit that swaps it into s.
func (s *State) Restore(next func() ([]byte, error)) (func(), error) {
	fresh := NewState()
	for {
		b, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("federation: read snapshot record: %w", err)
		}
		var rec concordv1.FedSnapshotRecord
		if err := proto.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("federation: decode snapshot record: %w", err)
		}
		switch r := rec.GetRecord().(type) {
		case *concordv1.FedSnapshotRecord_Link:
			fresh.links[r.Link.GetPeerSystemId()] = r.Link
		case *concordv1.FedSnapshotRecord_Token:
			fresh.tokens[string(r.Token.GetSecretHash())] = r.Token
		case *concordv1.FedSnapshotRecord_Imported:
			fresh.imported[r.Imported.GetPeerSystemId()] = r.Imported
		case *concordv1.FedSnapshotRecord_Outbox:
			fresh.outbox[r.Outbox.GetPeerSystemId()] = r.Outbox
		case *concordv1.FedSnapshotRecord_Inbox:
			fresh.inbox[r.Inbox.GetSourceSystemId()] = r.Inbox
		case *concordv1.FedSnapshotRecord_PendingUnlink:
			fresh.pending[r.PendingUnlink.GetLink().GetPeerSystemId()] = r.PendingUnlink
		case *concordv1.FedSnapshotRecord_Staging:
			fresh.staging[r.Staging.GetPeerSystemId()] = r.Staging
			fresh.stagedBytes[r.Staging.GetPeerSystemId()] = stagedSize(r.Staging)
		case *concordv1.FedSnapshotRecord_Gateway:
			fresh.gateways[r.Gateway.GetSystemId()] = r.Gateway
		default:
			return nil, fmt.Errorf("federation: unknown snapshot record %T", r)
		}
	}
	return func() {
		s.mu.Lock()
		s.links, s.tokens, s.imported = fresh.links, fresh.tokens, fresh.imported
		s.outbox, s.inbox, s.pending, s.staging = fresh.outbox, fresh.inbox, fresh.pending, fresh.staging
		s.stagedBytes, s.gateways = fresh.stagedBytes, fresh.gateways
		wake := s.changed
		s.changed = make(chan struct{})
		s.mu.Unlock()
		close(wake)
	}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
