//go:build linux

package clustertest

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
// the server processes. A third run keeps the non-voters' data on tmpfs
// (see benchNonVoters). Run without -race:
//
//	go test -run '^$' -bench NonVoters -benchtime 5s ./cluster-test/
func BenchmarkNonVoters(b *testing.B) {
	var base []float64 // the baselines before and after
	runs := []struct {
		n     int
		shm   bool
		label string
	}{
		{3, false, "baseline-voters=3-run1"},
		{7, false, "voters=3+nonvoters=4"},
		{7, true, "voters=3+nonvoters=4-on-tmpfs"},
		{3, false, "baseline-voters=3-run2"},
	}
	for _, r := range runs {
		n := r.n
		b.Run(r.label+"/map-update/clients=32", func(b *testing.B) {
			rate := benchNonVoters(b, n, r.shm)
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
// the writes; it returns writes/s. With shm the non-voters (the servers
// after the first three, which bootstrap as the voters) keep their data
// on tmpfs: their fsyncs then no longer queue on the voters' disk, which
// tells the shared disk's share of the cost from the rest.
func benchNonVoters(b *testing.B, n int, shm bool) float64 {
	args := func(i int) []string {
		a := []string{"--raft-voters", "3", "--log-level", "warn"}
		if shm && i >= 3 {
			dir, err := os.MkdirTemp("/dev/shm", "concord-bench-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = os.RemoveAll(dir) })
			a = append(a, "--data-dir", dir)
		}
		return a
	}
	pc := StartProcs(b, n, WithProcArgs(args))
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
	cpu0 := procsCPU(b, pc)
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
	// CPU time per 1000 writes of the busiest voter (the leader) and of
	// all non-voters: what the design costs, whatever the shared machine
	// does to the rates.
	cpu1 := procsCPU(b, pc)
	var leaderCPU, nonvoterCPU time.Duration
	for i := range cpu1 {
		d := cpu1[i] - cpu0[i]
		if slices.Contains(voters, i) {
			leaderCPU = max(leaderCPU, d)
		} else {
			nonvoterCPU += d
		}
	}
	if k := float64(count.Load()) / 1000; k > 0 {
		b.ReportMetric(float64(leaderCPU.Milliseconds())/k, "leader-cpu-ms/kwrite")
		b.ReportMetric(float64(nonvoterCPU.Milliseconds())/k, "nonvoters-cpu-ms/kwrite")
	}
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

// procsCPU returns each process's CPU time so far (user + system, from
// /proc/PID/stat), by index.
func procsCPU(b *testing.B, pc *ProcCluster) []time.Duration {
	out := make([]time.Duration, len(pc.Procs()))
	for i, p := range pc.Procs() {
		p.mu.Lock()
		pid := p.cmd.Process.Pid
		p.mu.Unlock()
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatalf("cpu of %s: %v", p, err)
		}
		// Fields after the command name (which may hold spaces) start
		// after the last ')': state is field 3, utime 14, stime 15.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		out[i] = time.Duration(utime+stime) * time.Second / clockTicks
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100
