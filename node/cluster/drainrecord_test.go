package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// replicaStore is a RaftConfigurator whose Apply applies to a registry
// replica at once, as a one-node log would.
type replicaStore struct {
	*configOnly
	reg      *registry.State
	index    uint64
	proposed []concordv1.CommandType
	// earlier are entries another leader put in the log before this
	// store's next proposal, which this replica had not applied when its
	// leader read its state: applied first.
	earlier []func()
}

func newReplicaStore(t *testing.T, servers []raftstore.Server) *replicaStore {
	t.Helper()
	reg, err := registry.New(registry.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &replicaStore{configOnly: &configOnly{servers: servers}, reg: reg}
}

func (s *replicaStore) Apply(_ context.Context, t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	for _, f := range s.earlier {
		f()
	}
	s.earlier = nil
	s.proposed = append(s.proposed, t)
	return s.apply(t, msg)
}

func (s *replicaStore) apply(t concordv1.CommandType, msg proto.Message) (any, uint64, error) {
	s.index++
	res, err := s.reg.Handlers()[t].Apply(s.index, msg)
	return res, s.index, err
}

func (s *replicaStore) Stats() map[string]string { return map[string]string{"term": "3"} }

func (s *replicaStore) recordLevel(t *testing.T, level int) {
	t.Helper()
	if _, _, err := s.apply(concordv1.CommandType_COMMAND_TYPE_SYSTEM_FSM_LEVEL, &concordv1.SystemFSMLevel{Meta: &concordv1.CommandMeta{}, Level: uint32(level)}); err != nil {
		t.Fatal(err)
	}
}

func (s *replicaStore) admitted() []string {
	adm, _ := s.reg.DrainAdmissions()
	var out []string
	for _, a := range adm {
		out = append(out, a.NodeID)
	}
	return out
}

// fourServers is three voters and a spare, every member advertising level.
func fourServers(level int) ([]raftstore.Server, *fakeMembers) {
	servers := []raftstore.Server{{ID: "n1", Voter: true}, {ID: "n2", Voter: true}, {ID: "n3", Voter: true}, {ID: "n4"}}
	fm := newFakeMembers()
	for _, s := range servers {
		fm.set(membership.Member{ID: s.ID, NodeMeta: membership.NodeMeta{FSMLevel: level}})
	}
	return servers, fm
}

// newAdmitter is leader id's reconciler over st, leading.
func newAdmitter(t *testing.T, id string, st *replicaStore, fm *fakeMembers, now *time.Time) *Reconciler {
	t.Helper()
	cfg := testConfig(t, id)
	cfg.MinQuorum, cfg.RaftVoters = 3, 3
	cfg.Now = func() time.Time { return *now }
	r, err := NewReconciler(cfg, ReconcilerDeps{Store: st, Members: fm, Levels: st.reg, Drains: st.reg})
	if err != nil {
		t.Fatal(err)
	}
	r.leading.Store(true)
	return r
}

// The gap the replicated admissions close: leader n1 admits n3's drain,
// leadership moves to n2 before gossip shows n3 draining, and n2 refuses
// n1's drain (with one spare, the two leave 2 voters, below 3). A new
// leader whose replica had not applied the admission yet when it decided
// has its record refused by apply and decides again from the current set.
// The admission stops counting once it expires.
func TestAdmitDrain_RecordedAdmissionSurvivesLeaderChange(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	servers, fm := fourServers(registry.FSMLevel)
	st := newReplicaStore(t, servers)
	st.recordLevel(t, registry.FSMLevelDrainAdmissions)

	a := newAdmitter(t, "n1", st, fm, &now)
	if _, err := a.AdmitDrain(ctx, "n3", false, time.Minute); err != nil {
		t.Fatalf("n3's drain on leader n1: %v", err)
	}
	if got := st.admitted(); !slices.Equal(got, []string{"n3"}) {
		t.Fatalf("recorded admissions %v, want [n3]", got)
	}
	if len(a.drains.leases) != 0 {
		t.Fatalf("a replicated admission also kept in memory: %v", a.drains.leases)
	}
	a.leading.Store(false)
	b := newAdmitter(t, "n2", st, fm, &now) // a new leader, its memory empty
	if _, err := b.AdmitDrain(ctx, "n1", false, time.Minute); !errors.Is(err, ErrDrainRefused) {
		t.Fatalf("n1's drain on the new leader n2: %v, want ErrDrainRefused", err)
	}

	// The same on a replica that had not applied n3's admission when its
	// leader decided.
	late := newReplicaStore(t, servers)
	late.recordLevel(t, registry.FSMLevelDrainAdmissions)
	late.earlier = []func(){func() {
		_, _, _ = late.apply(concordv1.CommandType_COMMAND_TYPE_DRAIN_ADMIT, &concordv1.DrainAdmit{
			Meta: &concordv1.CommandMeta{TimestampMs: now.UnixMilli(), NodeId: "n1"}, NodeId: "n3", ExpiresAtMs: now.Add(time.Minute).UnixMilli()})
	}}
	c := newAdmitter(t, "n2", late, fm, &now)
	if _, err := c.AdmitDrain(ctx, "n1", false, time.Minute); !errors.Is(err, ErrDrainRefused) {
		t.Fatalf("n1's drain decided before n3's admission was applied: %v, want ErrDrainRefused", err)
	}
	if got := late.admitted(); !slices.Equal(got, []string{"n3"}) {
		t.Fatalf("recorded admissions %v, want [n3]", got)
	}

	now = now.Add(time.Minute)
	if _, err := b.AdmitDrain(ctx, "n1", false, time.Minute); err != nil {
		t.Fatalf("n1's drain after n3's admission expired: %v", err)
	}
	if got := st.admitted(); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("recorded admissions %v after n3's expiry, want [n1] (the expired one dropped)", got)
	}
}

// While a server advertises a level below FSMLevelDrainAdmissions, or the
// level is not yet recorded, admissions are kept in the leader's memory
// (no command an older build would panic on reaches the log); once the
// level is recorded they are replicated, and the ones still in memory keep
// counting.
func TestAdmitDrain_MixedLevelsKeepAdmissionsInMemory(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	servers, fm := fourServers(registry.FSMLevel)
	fm.set(membership.Member{ID: "n4", NodeMeta: membership.NodeMeta{FSMLevel: registry.FSMLevelSystemRecord}}) // not upgraded yet
	st := newReplicaStore(t, servers)
	st.recordLevel(t, registry.FSMLevelSystemRecord)
	r := newAdmitter(t, "n1", st, fm, &now)
	if _, err := r.AdmitDrain(ctx, "n3", false, time.Minute); err != nil {
		t.Fatalf("n3's drain: %v", err)
	}
	if len(st.proposed) != 0 || len(st.admitted()) != 0 {
		t.Fatalf("proposed %v below the level, want nothing", st.proposed)
	}
	if _, ok := r.drains.leases["n3"]; !ok {
		t.Fatal("n3's admission not kept in memory below the level")
	}
	// n4 upgraded, the level not recorded yet: still in memory.
	fm.set(membership.Member{ID: "n4", NodeMeta: membership.NodeMeta{FSMLevel: registry.FSMLevel}})
	if _, err := r.AdmitDrain(ctx, "n3", false, time.Minute); err != nil || len(st.proposed) != 0 {
		t.Fatalf("n3's drain again before the record: %v, proposed %v", err, st.proposed)
	}
	st.recordLevel(t, registry.FSMLevelDrainAdmissions)
	if _, err := r.AdmitDrain(ctx, "n2", false, time.Minute); !errors.Is(err, ErrDrainRefused) {
		t.Fatalf("n2's drain with n3's admission in memory: %v, want ErrDrainRefused", err)
	}
	if _, err := r.AdmitDrain(ctx, "n2", true, time.Minute); err != nil {
		t.Fatalf("n2's forced drain: %v", err)
	}
	if got := st.admitted(); !slices.Equal(got, []string{"n2"}) || !slices.Equal(st.proposed, []concordv1.CommandType{concordv1.CommandType_COMMAND_TYPE_DRAIN_ADMIT}) {
		t.Fatalf("recorded %v, proposed %v; want n2's admission recorded", got, st.proposed)
	}
}

// The leader releases a recorded admission whose node left the Raft
// configuration or that expired, and keeps the others; below the level it
// proposes nothing.
func TestReleaseDrains(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_000, 0)
	servers, fm := fourServers(registry.FSMLevel)
	st := newReplicaStore(t, servers)
	st.recordLevel(t, registry.FSMLevelDrainAdmissions)
	admit := func(id string, until time.Time) {
		_, last := st.reg.DrainAdmissions()
		if _, _, err := st.apply(concordv1.CommandType_COMMAND_TYPE_DRAIN_ADMIT, &concordv1.DrainAdmit{
			Meta: &concordv1.CommandMeta{TimestampMs: now.UnixMilli()}, NodeId: id, BasedOnIndex: last, ExpiresAtMs: until.UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	admit("n2", now.Add(time.Second))
	admit("n3", now.Add(time.Hour))
	admit("n5", now.Add(time.Hour)) // drained and gone: not configured
	now = now.Add(2 * time.Second)
	r := newAdmitter(t, "n1", st, fm, &now)

	fm.set(membership.Member{ID: "n4", NodeMeta: membership.NodeMeta{FSMLevel: registry.FSMLevelSystemRecord}})
	in, err := r.view(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.releaseDrains(ctx, in)
	if len(st.proposed) != 0 {
		t.Fatalf("proposed %v while a server advertises a lower level", st.proposed)
	}
	fm.set(membership.Member{ID: "n4", NodeMeta: membership.NodeMeta{FSMLevel: registry.FSMLevel}})
	if in, err = r.view(ctx); err != nil {
		t.Fatal(err)
	}
	r.releaseDrains(ctx, in)
	if got := st.admitted(); !slices.Equal(got, []string{"n3"}) {
		t.Fatalf("admissions %v after the release pass, want [n3]", got)
	}
	for _, p := range st.proposed {
		if p != concordv1.CommandType_COMMAND_TYPE_DRAIN_RELEASE {
			t.Fatalf("proposed %v, want releases only", st.proposed)
		}
	}
}
