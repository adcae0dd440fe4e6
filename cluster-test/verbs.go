package clustertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/raftstore"
)

// Eventually calls check at once and then every PollInterval until it
// returns nil; after timeout it fails t with check's last error.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	if err := Poll(context.Background(), timeout, check); err != nil {
		t.Fatalf("clustertest: not true after %v: %v", timeout, err)
	}
}

// Poll is Eventually without a testing.TB: it returns check's last error
// after timeout (or when ctx ends), nil as soon as check passes, and at
// once the error wrapped in a Permanent.
func Poll(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return perm.err
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// Permanent wraps err so that Poll and Eventually stop retrying and
// report it.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }

// Leader waits until every running node agrees on one leader, which is
// leading, and the agreement (leader and term) holds for one election
// window; it returns that node.
func (c *Cluster) Leader(t testing.TB) *Node {
	t.Helper()
	return c.LeaderAmong(t, c.Running()...)
}

// LeaderAmong is Leader over a subset of nodes (one side of a partition).
func (c *Cluster) LeaderAmong(t testing.TB, nodes ...*Node) *Node {
	t.Helper()
	var leader *Node
	Eventually(t, LeaderTimeout, func() error {
		l, err := c.agreedLeader(nodes)
		if err != nil {
			return err
		}
		term := l.term()
		time.Sleep(ElectionWindow) // stability means: still so one election window later
		l2, err := c.agreedLeader(nodes)
		if err != nil {
			return err
		}
		if l2 != l || l2.term() != term {
			return fmt.Errorf("leader moved from %s (term %d) to %s (term %d)", l, term, l2, l2.term())
		}
		leader = l
		return nil
	})
	return leader
}

// agreedLeader returns the leader every node in nodes names, if they agree
// on one that is running, leading, and in the same term as all of them.
func (c *Cluster) agreedLeader(nodes []*Node) (*Node, error) {
	if len(nodes) == 0 {
		return nil, errors.New("no running nodes")
	}
	var id string
	var term uint64
	for k, n := range nodes {
		st := n.Store()
		if st == nil {
			return nil, fmt.Errorf("%s is not running", n)
		}
		lid, _ := st.Leader()
		if lid == "" {
			return nil, fmt.Errorf("%s knows no leader", n)
		}
		if k == 0 {
			id, term = lid, n.term()
			continue
		}
		if lid != id {
			return nil, fmt.Errorf("%s follows %s but %s follows %s", nodes[0], id, n, lid)
		}
		if tm := n.term(); tm != term {
			return nil, fmt.Errorf("%s is in term %d, %s in term %d", nodes[0], term, n, tm)
		}
	}
	l := c.NodeByID(id)
	if l == nil || l.Store() == nil {
		return nil, fmt.Errorf("leader %s is not a running harness node", id)
	}
	if l.Store().State() != raftstore.StateLeader {
		return nil, fmt.Errorf("%s is named leader but is %s", l, l.Store().State())
	}
	return l, nil
}

// term is the node's current Raft term (0 when down).
func (n *Node) term() uint64 {
	st := n.Store()
	if st == nil {
		return 0
	}
	v, _ := strconv.ParseUint(st.Stats()["term"], 10, 64)
	return v
}

// Followers returns the running nodes other than the current leader.
func (c *Cluster) Followers(t testing.TB) []*Node {
	t.Helper()
	l := c.Leader(t)
	var out []*Node
	for _, n := range c.Running() {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// WaitApplied waits until every running node's FSM has applied index.
func (c *Cluster) WaitApplied(t testing.TB, index uint64) {
	t.Helper()
	Eventually(t, ConvergeTimeout, func() error {
		for _, n := range c.Running() {
			if st := n.Store(); st != nil && st.AppliedIndex() < index {
				return fmt.Errorf("%s applied %d of %d", n, st.AppliedIndex(), index)
			}
		}
		return nil
	})
}

// RequireConverged waits until every running node's registry has the same
// Digest.
func (c *Cluster) RequireConverged(t testing.TB) {
	t.Helper()
	Eventually(t, ConvergeTimeout, c.converged)
}

func (c *Cluster) converged() error {
	nodes := c.Running()
	if len(nodes) == 0 {
		return errors.New("no running nodes")
	}
	var first, firstSum string
	for k, n := range nodes {
		srv := n.Server()
		if srv == nil {
			return fmt.Errorf("%s stopped while checking", n)
		}
		d, sum := Digest(srv.Registry())
		if k == 0 {
			first, firstSum = d, sum
			continue
		}
		if d != first {
			return fmt.Errorf("registry of %s differs from %s: %s vs %s", n, nodes[0], sum, firstSum)
		}
	}
	return nil
}

// Digest hashes the replicated registry state a Reader exposes: every
// agent, scope (with members), session (with subscriptions and cursors)
// and the ids of the retained event window. It also returns a short
// human-readable summary for error messages.
func Digest(r registry.Reader) (digest, summary string) {
	h := sha256.New()
	agents := r.Agents()
	for _, a := range agents {
		fmt.Fprintf(h, "agent %+v\n", a)
	}
	scopes := r.Scopes()
	for _, s := range scopes {
		fmt.Fprintf(h, "scope %+v\n", s)
	}
	sessions := r.Sessions()
	slices.SortFunc(sessions, func(a, b registry.Session) int { return strings.Compare(a.ID, b.ID) })
	for _, s := range sessions {
		fmt.Fprintf(h, "session %+v\n", s)
	}
	oldest, last := r.Window()
	fmt.Fprintf(h, "window %d %d\n", oldest, last)
	events := 0
	for pos := oldest - min(oldest, 1); ; {
		batch := r.EventsAfter(pos, 1024)
		if len(batch) == 0 {
			break
		}
		for _, ev := range batch {
			fmt.Fprintf(h, "event %d %s %s\n", ev.Position, ev.ID, ev.Type)
			pos = ev.Position
		}
		events += len(batch)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return sum, fmt.Sprintf("{%d agents, %d scopes, %d sessions, %d events, last %d, sha %.12s}",
		len(agents), len(scopes), len(sessions), events, last, sum)
}
