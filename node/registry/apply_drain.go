package registry

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// Drain admissions in replicated state (FSMLevelDrainAdmissions). The
// leader that admits a drain (node/cluster drainadmit.go) records it with
// DRAIN_ADMIT, so a leader elected before gossip shows the node draining
// still counts it against --min-quorum. Apply never reads a clock: the
// expiry travels in the command, and what has expired is judged by the
// command's own timestamp. Admissions are decided one at a time against
// the set the leader read: a DRAIN_ADMIT quotes the index of the last one
// applied then (based_on_index), and apply refuses it when another was
// applied since, so two leaders in a row cannot both decide from a set
// missing the other's admission.

// ErrDrainAdmitStale is returned by the apply of a DRAIN_ADMIT whose
// leader decided without an admission applied since (based_on_index is
// not the last DRAIN_ADMIT's index): the leader reads the admissions again
// and decides afresh.
var ErrDrainAdmitStale = errors.New("registry: drain admission decided without an admission applied since")

// DrainAdmission is a drain recorded by DRAIN_ADMIT.
type DrainAdmission struct {
	// NodeID is the drained node.
	NodeID string
	// Index is the Raft index of the DRAIN_ADMIT; a release names it.
	Index uint64
	// LeaderID and LeaderTerm name the leader that admitted it.
	LeaderID   string
	LeaderTerm uint64
	// ExpiresAtMs is when it stops counting, by the admitting leader's
	// clock (ms since the Unix epoch).
	ExpiresAtMs int64
}

// DrainAdmissions returns the recorded admissions, sorted by node id, and
// the index of the last DRAIN_ADMIT applied, which the next one must quote
// as its based_on_index. Expired ones are included until a command drops
// them: the caller judges expiry by its own clock.
func (s *State) DrainAdmissions() ([]DrainAdmission, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedDrains(s.d.drains), s.d.drainAdmitIndex
}

func sortedDrains(m map[string]DrainAdmission) []DrainAdmission {
	out := make([]DrainAdmission, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b DrainAdmission) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// drainAdmitHandler applies COMMAND_TYPE_DRAIN_ADMIT.
func (s *State) drainAdmitHandler() raftstore.Handler {
	return raftstore.Handler{
		New: func() proto.Message { return new(concordv1.DrainAdmit) },
		Apply: func(index uint64, msg proto.Message) (any, error) {
			m, ok := msg.(*concordv1.DrainAdmit)
			if !ok {
				panic(fmt.Sprintf("registry: drain admit handler got unexpected message type %T", msg))
			}
			now := m.GetMeta().GetTimestampMs()
			if m.GetNodeId() == "" || m.GetExpiresAtMs() <= now {
				return nil, errf(CodeInvalidParams, "node_id", "a drain admission needs a node id and an expiry after its timestamp")
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			d := s.d
			if m.GetBasedOnIndex() != d.drainAdmitIndex {
				return nil, fmt.Errorf("%w (decided after index %d, the last admission is at %d)",
					ErrDrainAdmitStale, m.GetBasedOnIndex(), d.drainAdmitIndex)
			}
			for id, a := range d.drains {
				if a.ExpiresAtMs <= now {
					delete(d.drains, id)
				}
			}
			d.drains[m.GetNodeId()] = DrainAdmission{NodeID: m.GetNodeId(), Index: index, LeaderID: m.GetMeta().GetNodeId(),
				LeaderTerm: m.GetLeaderTerm(), ExpiresAtMs: m.GetExpiresAtMs()}
			d.drainAdmitIndex = index
			return nil, nil
		},
	}
}

// drainReleaseHandler applies COMMAND_TYPE_DRAIN_RELEASE: the admission
// named goes; a release of one already gone, or replaced by a newer
// admission of the node, changes nothing.
func (s *State) drainReleaseHandler() raftstore.Handler {
	return raftstore.Handler{
		New: func() proto.Message { return new(concordv1.DrainRelease) },
		Apply: func(_ uint64, msg proto.Message) (any, error) {
			m, ok := msg.(*concordv1.DrainRelease)
			if !ok {
				panic(fmt.Sprintf("registry: drain release handler got unexpected message type %T", msg))
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if a, ok := s.d.drains[m.GetNodeId()]; ok && a.Index == m.GetAdmittedIndex() {
				delete(s.d.drains, m.GetNodeId())
			}
			return nil, nil
		},
	}
}

// drainRecords and drainsFromRecords convert the admissions to and from
// the snapshot header's form.
func drainRecords(adm []DrainAdmission) []*concordv1.DrainAdmission {
	out := make([]*concordv1.DrainAdmission, 0, len(adm))
	for _, a := range adm {
		out = append(out, &concordv1.DrainAdmission{NodeId: a.NodeID, Index: a.Index, LeaderId: a.LeaderID,
			LeaderTerm: a.LeaderTerm, ExpiresAtMs: a.ExpiresAtMs})
	}
	return out
}

func drainsFromRecords(recs []*concordv1.DrainAdmission) (map[string]DrainAdmission, error) {
	out := make(map[string]DrainAdmission, len(recs))
	for _, r := range recs {
		if r.GetNodeId() == "" {
			return nil, fmt.Errorf("%w: a drain admission without a node id", ErrSnapshotFormat)
		}
		out[r.GetNodeId()] = DrainAdmission{NodeID: r.GetNodeId(), Index: r.GetIndex(), LeaderID: r.GetLeaderId(),
			LeaderTerm: r.GetLeaderTerm(), ExpiresAtMs: r.GetExpiresAtMs()}
	}
	return out, nil
}
