//go:build linux

package clustertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkNonVoters measures what non-voters cost writes (issue 14: at
// most 10%): a system of 3 voters alone and one of 3 voters + 4
// non-voters (--raft-voters 3), each as real server processes in the same
// run, one after the other, with the same 32 clients spread over the 3
// voters doing committed writes (map/agents/update, one in flight each).
// Non-voters replicate every entry but are not in the commit quorum, so
// on separate hosts the difference is the leader's extra replication
// work; on one shared machine every non-voter's fsync and apply also
// competes with the voters for the same cores. The baseline runs before
// and after (drift), and the non-voter run reports its ratio to the
// first (x-baseline), with writes/s, p50/p99 and the resident memory of
// the server processes. Run without -race:
//
//	go test -run '^$' -bench NonVoters -benchtime 5s ./cluster-test/
func BenchmarkNonVoters(b *testing.B) {
	var base []float64 // the baselines before and after
	for k, n := range []int{3, 7, 3} {
		name := fmt.Sprintf("voters=3+nonvoters=%d/map-update/clients=32", n-3)
		if n == 3 {
			name = fmt.Sprintf("baseline-voters=3-run%d/map-update/clients=32", k/2+1)
		}
		b.Run(name, func(b *testing.B) {
			rate := benchNonVoters(b, n)
			if n == 3 {
				base = append(base, rate)
				return
			}
			if len(base) > 0 && base[0] > 0 {
				// Against the baseline run before it; the one after shows
				// how much the machine drifted meanwhile.
				b.ReportMetric(rate/base[0], "x-baseline")
			}
		})
	}
}

// benchNonVoters starts n server processes with --raft-voters 3 and runs
// the writes; it returns writes/s.
func benchNonVoters(b *testing.B, n int) float64 {
	pc := StartProcs(b, n, WithProcArgs(func(int) []string { return []string{"--raft-voters", "3", "--log-level", "warn"} }))
	var voters []int
	Eventually(b, MembershipTimeout, func() error {
		var err error
		voters, err = procVoters(pc, n)
		return err
	})
	clients := make([]*Client, 32)
	agents := make([]string, len(clients))
	for k := range clients {
		clients[k] = pc.Connect(b, voters[k%len(voters)], map[string]any{"participantType": "system"})
		agents[k] = fmt.Sprintf("nv-%d", k)
		if err := clients[k].Register(agents[k], nil); err != nil {
			b.Fatalf("register: %s", Describe(err))
		}
	}
	states := []string{"busy", "idle"}
	start := time.Now()
	var count atomic.Int64
	runCallers(b, len(clients), func(w, i int) error {
		_, err := clients[w].Call("map/agents/update", map[string]any{"agentId": agents[w], "state": states[i%2]})
		if err == nil {
			count.Add(1)
		}
		return err
	})
	rate := float64(count.Load()) / time.Since(start).Seconds()
	var rss []float64
	for _, p := range pc.Procs() {
		code, body, err := httpGet(p.HTTPAddr, "/v1/status")
		var st struct {
			RSS int64 `json:"rssBytes"`
		}
		if err != nil || code != 200 || json.Unmarshal(body, &st) != nil {
			b.Fatalf("status of %s: %d %v", p, code, err)
		}
		rss = append(rss, float64(st.RSS)/(1<<20))
	}
	b.ReportMetric(slices.Max(rss), "max-rss-MB")
	var sum float64
	for _, r := range rss {
		sum += r
	}
	b.ReportMetric(sum/float64(len(rss)), "mean-rss-MB")
	b.Logf("%d servers: RSS per process (MB) %v", n, rss)
	return rate
}

// procVoters returns the indexes of the voters once the configuration
// holds 3 voters and n-3 non-voters.
func procVoters(pc *ProcCluster, n int) ([]int, error) {
	code, body, err := httpGet(pc.Proc(0).HTTPAddr, "/v1/raft/peers")
	if err != nil || code != 200 {
		return nil, fmt.Errorf("raft peers: %d %v", code, err)
	}
	var res struct {
		Peers []struct {
			ID       string `json:"id"`
			Suffrage string `json:"suffrage"`
		} `json:"peers"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, err
	}
	var voters []int
	for _, p := range res.Peers {
		if p.Suffrage == "voter" {
			i, err := strconv.Atoi(p.ID[1:])
			if err != nil {
				return nil, err
			}
			voters = append(voters, i-1)
		}
	}
	if len(voters) != 3 || len(res.Peers) != n {
		return nil, fmt.Errorf("%d voters of %d servers, want 3 of %d", len(voters), len(res.Peers), n)
	}
	return voters, nil
}
