//go:build unix

package registry

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// The apply benchmarks measure what every replica (voter or non-voter)
// spends applying one replicated command: the entry's body decoded into
// the handler's message, as raftstore's applyCommand does, then
// Handler.Apply. The State has the default 10,000-event window, full
// before the timer starts, so pruning the window is part of every op.
// Bodies are encoded outside the timer, in batches.

// benchState is a State fed encoded command bodies.
type benchState struct {
	tb    testing.TB
	s     *State
	index uint64
	ids   uint64 // event ids handed out by meta
	ts    int64
}

func newBenchState(tb testing.TB) *benchState {
	s, err := New(DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	return &benchState{tb: tb, s: s, ts: 1_700_000_000_000}
}

// meta is a proposer's CommandMeta with n fresh event ids (mapsvc asks for
// 3 per agent update).
func (b *benchState) meta(n int) *concordv1.CommandMeta {
	b.ts++
	m := &concordv1.CommandMeta{TimestampMs: b.ts, NodeId: "node-1", Source: "participant-1"}
	for range n {
		b.ids++
		var u ulid.ULID
		_ = u.SetTime(uint64(b.ts))
		_ = u.SetEntropy([]byte{0, 0, byte(b.ids >> 56), byte(b.ids >> 48), byte(b.ids >> 40),
			byte(b.ids >> 32), byte(b.ids >> 24), byte(b.ids >> 16), byte(b.ids >> 8), byte(b.ids)})
		m.EventIds = append(m.EventIds, u.String())
	}
	return m
}

type encoded struct {
	typ  concordv1.CommandType
	body []byte
}

func (b *benchState) encode(typ concordv1.CommandType, msg proto.Message) encoded {
	body, err := proto.Marshal(msg)
	if err != nil {
		b.tb.Fatal(err)
	}
	return encoded{typ, body}
}

// apply decodes and applies one command the way the FSM does (with the
// handler's Decode when it has one).
func (b *benchState) apply(c encoded) any {
	h := b.s.handlers[c.typ]
	msg, err := decodeBody(h, c.body)
	if err != nil {
		b.tb.Fatal(err)
	}
	b.index++
	res, err := h.Apply(b.index, msg)
	if err != nil {
		b.tb.Fatalf("%v: %v", c.typ, err)
	}
	return res
}

// run applies the commands gen makes, batch ones at a time, b.N times in
// all; gen(i) must return the commands of the i-th op. Besides ns/op it
// reports cpu-ns/op, the process's CPU time (user and system, all
// threads: the GC's included) over the timed parts: on a machine shared
// with other work, wall time also counts waiting for a core.
func (b *benchState) run(bb *testing.B, gen func(i int) []encoded) {
	const batch = 512
	bb.ReportAllocs()
	bb.ResetTimer()
	var cpu time.Duration
	for done := 0; done < bb.N; {
		bb.StopTimer()
		var cmds [][]encoded
		for i := done; i < min(done+batch, bb.N); i++ {
			cmds = append(cmds, gen(i))
		}
		bb.StartTimer()
		start := processCPU()
		for _, op := range cmds {
			for _, c := range op {
				b.apply(c)
			}
		}
		cpu += processCPU() - start
		done += len(cmds)
	}
	bb.ReportMetric(float64(cpu.Nanoseconds())/float64(bb.N), "cpu-ns/op")
}

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// agents registers n agents, each in its own session, as MAP clients do.
func (b *benchState) agents(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		sid, id := fmt.Sprintf("session-%04d", i), fmt.Sprintf("agent-%04d", i)
		b.apply(b.encode(cSessionOpen, &concordv1.SessionOpenRequest{Meta: b.meta(1), Session: &concordv1.SessionRecord{
			Id: sid, ParticipantId: id, ParticipantType: "agent", HomeNode: "node-1", ResumeTokenHash: []byte("hash"),
		}}))
		b.apply(b.encode(cAgentRegister, &concordv1.AgentRegisterRequest{Meta: b.meta(3), Agent: &concordv1.AgentRecord{
			Id: id, Name: "bench agent", OwnerId: id, SessionId: sid, HomeNode: "node-1",
		}}))
		ids[i] = id
	}
	return ids
}

// update is map/agents/update {agentId, state} as node/mapsvc proposes
// it, with ids event ids (mapsvc sent 3 for every update, it now sends one per possible event).
func (b *benchState) update(id, state string, ids int) encoded {
	return b.encode(cAgentUpdate, &concordv1.AgentUpdateRequest{Meta: b.meta(ids), AgentId: id, State: proto.String(state)})
}

// fillWindow applies agent updates until the event window is full.
func (b *benchState) fillWindow(agents []string) {
	for i := 0; i <= b.s.window; i++ {
		b.apply(b.update(agents[i%len(agents)], [2]string{"busy", "idle"}[i/len(agents)%2], 1))
	}
	if oldest, _ := b.s.Window(); oldest <= 1 {
		b.tb.Fatal("event window not full")
	}
}

// BenchmarkApply_AgentUpdate: map/agents/update of a state (one
// agent_state_changed event), 64 agents in turn, as in BenchmarkNonVoters,
// with the 3 event ids mapsvc used to send and the 1 it sends now.
func BenchmarkApply_AgentUpdate(bb *testing.B) {
	for _, ids := range []int{3, 1} {
		bb.Run(fmt.Sprintf("ids=%d", ids), func(bb *testing.B) {
			b := newBenchState(bb)
			agents := b.agents(64)
			b.fillWindow(agents)
			states := [2]string{"busy", "idle"}
			round := b.s.window/len(agents) + 1
			b.run(bb, func(i int) []encoded {
				return []encoded{b.update(agents[i%len(agents)], states[(round+i/len(agents))%2], ids)}
			})
		})
	}
}

// BenchmarkApply_SessionCycle: one connection's life, four commands: a
// session opens (participant_connected), registers an agent
// (agent_registered), loses its connection (SESSION_DETACH:
// participant_disconnected, agent_unregistered) and expires.
func BenchmarkApply_SessionCycle(bb *testing.B) {
	b := newBenchState(bb)
	b.fillWindow(b.agents(64))
	b.run(bb, func(i int) []encoded {
		sid, id := fmt.Sprintf("cycle-session-%d", i), fmt.Sprintf("cycle-agent-%d", i)
		open := b.encode(cSessionOpen, &concordv1.SessionOpenRequest{Meta: b.meta(1), Session: &concordv1.SessionRecord{
			Id: sid, ParticipantId: id, ParticipantType: "agent", HomeNode: "node-1", ResumeTokenHash: []byte("hash"),
			DisconnectPolicy: &concordv1.DisconnectPolicyRecord{AgentBehavior: BehaviorUnregister},
		}})
		reg := b.encode(cAgentRegister, &concordv1.AgentRegisterRequest{Meta: b.meta(3), Agent: &concordv1.AgentRecord{
			Id: id, Name: "bench agent", OwnerId: id, SessionId: sid, HomeNode: "node-1",
		}})
		detach := b.encode(cSessionDetach, &concordv1.SessionDetachRequest{Meta: b.meta(2), SessionId: sid, Epoch: 1,
			HomeNode: "node-1", Reason: "connection lost", TtlMs: 1})
		expire := b.encode(cSessionExpire, &concordv1.SessionExpireRequest{Meta: b.meta(0), SessionId: sid, Epoch: 2, Kind: ExpireTTL})
		return []encoded{open, reg, detach, expire}
	})
}

// BenchmarkApply_SubscriptionCursor: a fanout hub's cursor flush moving
// the cursors of 16 of 64 subscriptions (no event).
func BenchmarkApply_SubscriptionCursor(bb *testing.B) {
	b := newBenchState(bb)
	agents := b.agents(64)
	b.fillWindow(agents)
	for i := range agents {
		b.apply(b.encode(cSubAdd, &concordv1.SubscriptionAddRequest{Meta: b.meta(0), Subscription: &concordv1.SubscriptionRecord{
			Id: fmt.Sprintf("sub-%04d", i), SessionId: fmt.Sprintf("session-%04d", i), Filter: []byte(`{"eventTypes":["agent_state_changed"]}`),
		}}))
	}
	evs := b.s.EventsAfter(0, 0)
	b.run(bb, func(i int) []encoded {
		m := &concordv1.SubscriptionCursorRequest{Meta: b.meta(0)}
		for k := range 16 {
			n := (i*16 + k) % len(agents)
			seq := uint64(i*16+k) + 1
			m.Cursors = append(m.Cursors, &concordv1.SubscriptionCursor{SessionId: fmt.Sprintf("session-%04d", n),
				SubscriptionId: fmt.Sprintf("sub-%04d", n), EventId: evs[seq%uint64(len(evs))].ID, Seq: seq})
		}
		return []encoded{b.encode(cSubCursor, m)}
	})
}

// BenchmarkSnapshot_PersistWindow: Persist of a State holding 64 agents
// and a full 10,000-event window, per event. raft snapshots every 8,192
// entries by default, so every replica persists about one window's
// events per 8,192 commands: more than one event per applied command.
func BenchmarkSnapshot_PersistWindow(bb *testing.B) {
	b := newBenchState(bb)
	b.fillWindow(b.agents(64))
	bb.ReportAllocs()
	bb.ResetTimer()
	start := processCPU()
	for range bb.N {
		snap, err := b.s.Snapshot()
		if err != nil {
			bb.Fatal(err)
		}
		n := 0
		if err := snap.Persist(func(rec []byte) error { n += len(rec); return nil }); err != nil {
			bb.Fatal(err)
		}
		snap.Release()
	}
	bb.ReportMetric(float64((processCPU()-start).Nanoseconds())/float64(bb.N)/float64(b.s.window), "cpu-ns/event")
}
