//go:build linux

package clustertest

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestProcs_KillLeader runs three real concord processes, writes through a
// follower, kill -9s the leader, and checks that a new leader is elected,
// writes continue (time to the first successful write is logged), and
// that after the killed process restarts every acknowledged write is
// present on every node.
func TestProcs_KillLeader(t *testing.T) {
	pc := StartProcs(t, 3)
	leader := pc.Leader(t)
	var follower *Proc
	for _, p := range pc.Procs() {
		if p != leader {
			follower = p
			break
		}
	}
	cl := pc.Connect(t, follower.Index, map[string]any{
		"participantType": "system", "disconnectPolicy": map[string]any{"agentBehavior": "orphan"},
	})
	var acked []string
	write := func(id string) error {
		err := cl.Register(id, nil)
		if err == nil {
			acked = append(acked, id)
		}
		return err
	}
	for k := range 20 {
		if err := write(fmt.Sprintf("pre-%d", k)); err != nil {
			t.Fatalf("write before the kill: %s", Describe(err))
		}
	}

	pc.Kill9(t, leader.Index)
	killed := time.Now()
	k := 0
	Eventually(t, LeaderTimeout, func() error {
		k++
		return write(fmt.Sprintf("during-%d", k))
	})
	t.Logf("leader %s killed: first successful write through %s after %v (%d attempts)", leader, follower, time.Since(killed), k)
	newLeader := pc.Leader(t)
	if newLeader == leader {
		t.Fatalf("the killed process %s is still leader", leader)
	}
	for k := range 20 {
		if err := write(fmt.Sprintf("post-%d", k)); err != nil {
			t.Fatalf("write after failover: %s", Describe(err))
		}
	}

	pc.Restart(t, leader.Index)
	pc.Leader(t)
	requireProcAgents(t, pc, acked)
}

// requireProcAgents waits until map/agents/list on every running
// process returns the same agents and they include every id in want. It
// reads every page: a list holds at most the server's MaxPageSize (1000)
// agents, and a writer running for a while acknowledges more. The
// callers' agents are never unregistered (their owners connect with the
// orphan disconnect policy), so a missing one is a lost write; the error
// says on which nodes it is missing and on which it is present.
func requireProcAgents(t *testing.T, pc *ProcCluster, want []string) {
	t.Helper()
	procs := pc.Running()
	clients := make([]*Client, len(procs))
	for k, p := range procs {
		clients[k] = pc.Connect(t, p.Index, map[string]any{"participantType": "client"})
	}
	Eventually(t, ConvergeTimeout, func() error {
		lists := make([][]string, len(procs))
		for k, cl := range clients {
			ids, err := listAgentIDs(cl)
			if err != nil {
				return fmt.Errorf("%s: %w", procs[k], err)
			}
			lists[k] = ids
		}
		for _, w := range want {
			var on, off []string
			for k, ids := range lists {
				if _, found := slices.BinarySearch(ids, w); found {
					on = append(on, procs[k].ID)
				} else {
					off = append(off, fmt.Sprintf("%s (%d agents)", procs[k].ID, len(ids)))
				}
			}
			if len(off) > 0 {
				return fmt.Errorf("acknowledged agent %s missing on %v, present on %v", w, off, on)
			}
		}
		for k := 1; k < len(lists); k++ {
			if !slices.Equal(lists[0], lists[k]) {
				return fmt.Errorf("%s lists %d agents, %s %d", procs[k], len(lists[k]), procs[0], len(lists[0]))
			}
		}
		return nil
	})
}

// listAgentIDs reads every page of map/agents/list and returns the ids,
// sorted.
func listAgentIDs(cl *Client) ([]string, error) {
	var ids []string
	cursor := ""
	for {
		params := map[string]any{"limit": 1000}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var res struct {
			Agents []struct {
				ID string `json:"id"`
			} `json:"agents"`
			NextCursor string `json:"nextCursor"`
		}
		if err := cl.CallInto("map/agents/list", params, &res); err != nil {
			return nil, fmt.Errorf("map/agents/list after %q: %s", cursor, Describe(err))
		}
		for _, a := range res.Agents {
			ids = append(ids, a.ID)
		}
		if res.NextCursor == "" {
			slices.Sort(ids)
			return ids, nil
		}
		if res.NextCursor <= cursor {
			return nil, fmt.Errorf("map/agents/list: cursor %q does not advance past %q", res.NextCursor, cursor)
		}
		cursor = res.NextCursor
	}
}
