package clustertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestFormation_BootstrapExpect forms 3- and 5-node clusters with
// --bootstrap-expect in several start orders (random ones log their seed)
// and checks one Raft configuration with every server a voter, and that a
// write through every node is visible on every node.
func TestFormation_BootstrapExpect(t *testing.T) {
	tests := []struct {
		name string
		n    int
		opts []Option
	}{
		{"3 nodes in order", 3, []Option{WithStartOrder(0, 1, 2)}},
		{"3 nodes reversed", 3, []Option{WithStartOrder(2, 1, 0)}},
		{"3 nodes random", 3, nil},
		{"5 nodes random", 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t, tt.n, tt.opts...)
			l := c.Leader(t)
			requireVoters(t, c, l, idsOf(c.Nodes()))
			for i := range tt.n {
				cl := c.Connect(t, i, map[string]any{"name": fmt.Sprintf("client-%d", i)})
				// A retryable error while leadership settles is legitimate; the
				// write must go through each node eventually.
				registerRetry(t, cl, fmt.Sprintf("agent-%d", i), nil)
			}
			c.RequireInvariants(t)
			if got := c.Ledger.Acked(); got != tt.n {
				t.Fatalf("acknowledged writes = %d, want %d", got, tt.n)
			}
		})
	}
}

// requireVoters waits until the leader's Raft configuration is exactly
// the given voters.
func requireVoters(t *testing.T, c *Cluster, l *Node, want []string) {
	t.Helper()
	slices.Sort(want)
	Eventually(t, MembershipTimeout, func() error {
		st := l.Store()
		if st == nil {
			return fmt.Errorf("%s is down", l)
		}
		servers, err := st.Configuration(context.Background())
		if err != nil {
			return err
		}
		var got []string
		for _, s := range servers {
			if !s.Voter {
				return fmt.Errorf("%s is not a voter: %+v", s.ID, servers)
			}
			got = append(got, s.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("raft voters %v, want %v", got, want)
		}
		return nil
	})
}

func idsOf(nodes []*Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.ID)
	}
	return out
}
