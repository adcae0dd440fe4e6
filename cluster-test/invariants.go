package clustertest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// RequireInvariants is how every scenario ends: the running replicas
// converge (RequireConverged), every acknowledged write recorded in the
// Ledger is reflected exactly once, and no two nodes were seen leading the
// same term.
func (c *Cluster) RequireInvariants(t testing.TB) {
	t.Helper()
	c.RequireConverged(t)
	nodes := c.Running()
	if len(nodes) > 0 {
		if err := c.Ledger.Check(nodes[0].Server().Registry()); err != nil {
			t.Errorf("clustertest: acknowledged writes: %v", err)
		}
	}
	if err := c.observer.check(); err != nil {
		t.Errorf("clustertest: %v", err)
	}
}

// leaderObserver samples every running node's Raft role and term all
// along the test and records which nodes led which term. A node counts as
// leader of a term when two consecutive samples agree (raft's Stats reads
// role and term separately, so one sample can straddle a step-down).
type leaderObserver struct {
	c    *Cluster
	quit chan struct{}
	done chan struct{}

	mu      sync.Mutex
	leaders map[uint64][]string // term -> confirmed leaders
	last    map[string]uint64   // node -> term it led at the previous sample
}

const observeInterval = 10 * time.Millisecond

func startLeaderObserver(c *Cluster) *leaderObserver {
	o := &leaderObserver{
		c: c, quit: make(chan struct{}), done: make(chan struct{}),
		leaders: map[uint64][]string{}, last: map[string]uint64{},
	}
	go o.run()
	return o
}

func (o *leaderObserver) run() {
	defer close(o.done)
	tick := time.NewTicker(observeInterval)
	defer tick.Stop()
	for {
		select {
		case <-o.quit:
			return
		case <-tick.C:
			o.sample()
		}
	}
}

func (o *leaderObserver) sample() {
	for _, n := range o.c.Running() {
		st := n.Store()
		if st == nil || st.State() != raftstore.StateLeader {
			o.record(n.ID, 0)
			continue
		}
		s := st.Stats()
		term, _ := strconv.ParseUint(s["term"], 10, 64)
		if s["state"] != "Leader" { // raft's own name (raft.Leader.String())
			term = 0
		}
		o.record(n.ID, term)
	}
}

func (o *leaderObserver) record(id string, term uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if term != 0 && o.last[id] == term && !slices.Contains(o.leaders[term], id) {
		o.leaders[term] = append(o.leaders[term], id)
	}
	o.last[id] = term
}

func (o *leaderObserver) stop() {
	select {
	case <-o.quit:
	default:
		close(o.quit)
	}
	<-o.done
}

// check reports every term led by more than one node, and fails when no
// leader was ever seen (the check would be vacuous).
func (o *leaderObserver) check() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.leaders) == 0 {
		return errors.New("the leader observer saw no leader at all")
	}
	var bad []string
	for term, ids := range o.leaders {
		if len(ids) > 1 {
			bad = append(bad, fmt.Sprintf("term %d: %v", term, ids))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("two leaders in one term: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Terms returns the leaders seen per term so far (for logs).
func (c *Cluster) Terms() map[uint64][]string {
	o := c.observer
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[uint64][]string, len(o.leaders))
	for k, v := range o.leaders {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Outcome is what a client learned about a write.
type Outcome int

// Write outcomes.
const (
	// Acked: the server answered success; the write is committed.
	Acked Outcome = iota + 1
	// Refused: the server answered a definite error; the write changed
	// nothing (a domain error, or refused before proposing).
	Refused
	// Unknown: no answer, or a retryable error after which the write may
	// or may not have been committed.
	Unknown
)

// OpKind is the kind of a ledger write.
type OpKind string

// Ledger write kinds.
const (
	OpRegister   OpKind = "register"
	OpUnregister OpKind = "unregister"
)

// LedgerOp is one write as the client saw it.
type LedgerOp struct {
	Kind    OpKind
	AgentID string
	Outcome Outcome
}

// Ledger records agent registrations and unregistrations made through
// harness clients and checks them against a replica. All methods are safe
// for concurrent use.
type Ledger struct {
	mu  sync.Mutex
	ops []LedgerOp
}

// Record adds one write.
func (l *Ledger) Record(kind OpKind, agentID string, o Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, LedgerOp{Kind: kind, AgentID: agentID, Outcome: o})
}

// Acked returns how many writes were acknowledged.
func (l *Ledger) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, op := range l.ops {
		if op.Outcome == Acked {
			n++
		}
	}
	return n
}

// Check verifies the ledger against a replica's registry, using its event
// log as the order of what happened. Per agent id:
//   - agent_registered events <= acknowledged + unknown registrations:
//     nothing was applied twice (a register of an id the caller owns, or
//     an orphan, succeeds without a new event, so there is no lower bound
//     per registration);
//   - at least one agent_registered event when a registration was
//     acknowledged;
//   - agent_unregistered events >= acknowledged unregistrations (each one
//     removed the agent; disconnect policies may add more);
//   - the agent is present in the state exactly when its last event is a
//     registration: state and log agree.
//
// It skips the counts when the event window no longer starts at the first
// event (pruned).
func (l *Ledger) Check(r registry.Reader) error {
	l.mu.Lock()
	ops := append([]LedgerOp(nil), l.ops...)
	l.mu.Unlock()
	type tally struct{ acked, unknown, events int }
	want := map[string]map[OpKind]*tally{}
	for _, op := range ops {
		if want[op.AgentID] == nil {
			want[op.AgentID] = map[OpKind]*tally{OpRegister: {}, OpUnregister: {}}
		}
		switch op.Outcome {
		case Acked:
			want[op.AgentID][op.Kind].acked++
		case Unknown:
			want[op.AgentID][op.Kind].unknown++
		}
	}
	lastEvent := scanAgentEvents(r, func(id string, kind OpKind) {
		if w := want[id]; w != nil {
			w[kind].events++
		}
	})
	oldest, _ := r.Window()
	var errs []string
	for id, w := range want {
		reg, unreg := w[OpRegister], w[OpUnregister]
		if oldest <= 1 {
			if reg.events > reg.acked+reg.unknown {
				errs = append(errs, fmt.Sprintf("%s: %d register events for %d acknowledged + %d unknown registrations", id, reg.events, reg.acked, reg.unknown))
			}
			if reg.acked > 0 && reg.events == 0 {
				errs = append(errs, fmt.Sprintf("%s: %d acknowledged registrations, no register event", id, reg.acked))
			}
			if unreg.events < unreg.acked {
				errs = append(errs, fmt.Sprintf("%s: %d unregister events for %d acknowledged unregistrations", id, unreg.events, unreg.acked))
			}
		}
		_, present := r.Agent(id)
		if shouldBe := lastEvent[id] == "agent_registered"; present != shouldBe {
			errs = append(errs, fmt.Sprintf("%s: present=%v but its last event is %q", id, present, lastEvent[id]))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("%d problems:\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	return nil
}

// scanAgentEvents walks the retained event window, calling fn for every
// agent_registered / agent_unregistered event, and returns the type of the
// last such event per agent.
func scanAgentEvents(r registry.Reader, fn func(id string, kind OpKind)) map[string]string {
	last := map[string]string{}
	for pos := uint64(0); ; {
		batch := r.EventsAfter(pos, 1024)
		if len(batch) == 0 {
			return last
		}
		for _, ev := range batch {
			pos = ev.Position
			kind := map[string]OpKind{"agent_registered": OpRegister, "agent_unregistered": OpUnregister}[ev.Type]
			if kind == "" {
				continue
			}
			for _, id := range ev.AgentIDs {
				last[id] = ev.Type
				fn(id, kind)
			}
		}
	}
}
