package clustertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/concordmap/concord/node"
)

// TestAutopilot_RaftVotersMismatchSparesCorrectJoiner: a server started
// with the wrong --raft-voters at the same time as a correct one stops
// alone; the correct one joins as a non-voter. The start check used to
// compare against every alive server, so the correct newcomer, seeing the
// wrong one in gossip, stopped too.
func TestAutopilot_RaftVotersMismatchSparesCorrectJoiner(t *testing.T) {
	c := New(t, 3, WithNodeConfig(func(i int, cfg *node.Config) {
		cfg.Cluster.RaftVoters = 3
		if i == 4 {
			cfg.Cluster.RaftVoters = 5
		}
	}))
	waitSuffrage(t, c, 3, 0)
	c.mu.Lock()
	good, bad := c.newNode(3, 0), c.newNode(4, 0)
	c.nodes = append(c.nodes, good, bad)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), NodeReadyTimeout)
	defer cancel()
	var goodErr, badErr error
	var wg sync.WaitGroup
	wg.Go(func() { badErr = c.start(ctx, bad) })
	wg.Go(func() { goodErr = c.start(ctx, good) })
	wg.Wait()
	if !errors.Is(badErr, node.ErrRaftVotersMismatch) || !strings.Contains(badErr.Error(), "--raft-voters is 5 here but 3") {
		t.Fatalf("start with --raft-voters 5 beside 3: %v", badErr)
	}
	if goodErr != nil {
		t.Fatalf("a correct server starting beside the wrong one: %v", goodErr)
	}
	_, nonvoters := waitSuffrage(t, c, 3, 1)
	if !slices.Contains(nonvoters, good.ID) {
		t.Fatalf("non-voters %v, want %s", nonvoters, good.ID)
	}
}
