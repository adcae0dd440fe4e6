//go:build linux

package clustertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkNonVoters measures what non-voters cost writes (issue 14: at
// most 10%): a system of 3 voters alone and one of 3 voters + 4
// non-voters (--raft-voters 3), both up as real server processes at once
// and loaded in turn, in alternating windows of nvWindow, with committed
// writes (map/agents/update, one in flight per client, clients spread
// over the 3 voters). Two loads: a moderate one (8 clients) and a
// saturating one (64 clients).
//
// Every system with non-voters is measured twice per round. As is, all 7
// servers and the load generator share this machine's cores, so every
// CPU millisecond a non-voter spends on its own fsync, decode and apply
// is taken from a voter: that is a cost of sharing a machine, not of the
// design. In the second window ("nonvoters-nice19") every thread of each
// non-voter process runs at nice 19 (setpriority), so the voters get the
// cores whenever they want them and the non-voters the rest: the nearest
// this one box gets to each server on its own machine, the deployment
// the issue is about. Non-voters still do all their work (they are paced,
// not starved: their CPU per write is reported too). Both figures are
// printed; neither replaces the other.
//
// Each window reports writes/s, p50/p99, CPU per 1000 writes of the
// leader and of all non-voters together, and the log writes per non-voter
// per 1000 writes (each one AppendEntries from the leader: what pacing
// changes). The leader's CPU per write does
// not depend on how the machine is shared: it is what replicating to the
// non-voters costs the leader. The "summary" sub-benchmarks log per load
// the medians of each arm and their ratios to the voters alone, and every
// server's resident memory. With CONCORD_BENCH_NONVOTERS_REV set to a git
// revision, a third system, 3+4 built from that revision, runs in the
// same rounds (before/after a change); CONCORD_BENCH_NONVOTERS_ROUNDS sets
// the rounds (default 3). With CONCORD_BENCH_NONVOTERS_PPROF
// set to a directory, servers run with --enable-debug and each window
// saves a CPU profile of the leader and of one non-voter there. Two
// experiments add arms: CONCORD_BENCH_NONVOTERS_STOPPED=1 measures the
// 3+4 system once more with its non-voter processes stopped (SIGSTOP) for
// the window, which takes both their work and the leader's replication to
// them away; CONCORD_BENCH_NONVOTERS_INTERVAL=D adds a 3+4 system run with
// --nonvoter-replication-interval D (a comma-separated list adds one system
// per interval). On a shared machine a fixed offered rate compares builds
// doing the same work: CONCORD_BENCH_NONVOTERS_RATE=R has the clients of
// each window send R writes/s in all (each client its share, on a
// schedule; a window that cannot keep up reports its lower rate), and the
// CPU per 1000 writes then says what each build spends for the same
// writes whatever else the machine runs. CONCORD_BENCH_NONVOTERS_CLIENTS
// (a comma-separated list, default 8,64) picks the loads and
// CONCORD_BENCH_NONVOTERS_NICE=0 drops the nice-19 arms. Each system also
// has one client on every non-voter that writes through it and reads its
// own write back there (map/agents/update, then map/agents/get: the
// read-your-writes fence) every 100 ms; "nv-rw" is that pair's latency, what
// pacing makes a non-voter's own clients wait;
// CONCORD_BENCH_NONVOTERS_NOPROBES=1 adds, per system with non-voters, an
// arm with those probes idle (what the clients waiting on non-voters cost).
//
// Host load drifts on a shared machine: single 5 s windows of the same
// arm have differed by x1.8 within one run. CONCORD_BENCH_NONVOTERS_PAIRS=N
// (in place of ROUNDS) runs short windows (2 s) with the baseline, the 3
// voters alone, between every two others: A B A C A B A C ... A, N
// windows per other arm. Each such window's ratio is taken against the
// mean of the two baseline windows beside it, so a drift slower than a
// few windows cancels, and the summary gives the median paired ratio with
// its spread (min, quartiles, max) over the N pairs (both systems are up
// throughout; the idle one costs little). The paired ratios are printed
// in any mode (against the nearest baseline windows), and beside them the
// ratio to the one baseline window before (the old method's per-window
// ratio) for comparison. Besides writes/s, p50/p99 and the leader's CPU
// per write they include writes per CPU-second of all servers together
// ("writes/servers-cpu", servers-cpu-ms/kwrite per window): while the
// servers' CPU limits the rate, that is the rate ratio a machine given to
// them alone would show, whatever share of this one other work takes. CONCORD_BENCH_NONVOTERS_WINDOW=D sets the window
// length (default 5 s, 2 s with PAIRS). The windows have a fixed length,
// so:
//
//	go test -run '^$' -bench NonVoters -benchtime 1x ./cluster-test/
func BenchmarkNonVoters(b *testing.B) {
	var extra []string
	pprofDir := os.Getenv("CONCORD_BENCH_NONVOTERS_PPROF")
	if pprofDir != "" {
		extra = []string{"--enable-debug"}
	}
	systems := []*nvSystem{startNVSystem(b, 3, extra), startNVSystem(b, 7, extra)}
	labels := []string{"voters=3", "voters=3+nonvoters=4"}
	if rev := os.Getenv("CONCORD_BENCH_NONVOTERS_REV"); rev != "" {
		systems = append(systems, startNVSystem(b, 7, extra, WithProcBinary(ConcordBinaryAt(b, rev))))
		labels = append(labels, "voters=3+nonvoters=4@"+rev)
	}
	if ds := os.Getenv("CONCORD_BENCH_NONVOTERS_INTERVAL"); ds != "" {
		for d := range strings.SplitSeq(ds, ",") {
			if _, err := time.ParseDuration(d); err != nil {
				b.Fatalf("CONCORD_BENCH_NONVOTERS_INTERVAL=%q: %v", ds, err)
			}
			systems = append(systems, startNVSystem(b, 7, append([]string{"--nonvoter-replication-interval", d}, extra...)))
			labels = append(labels, "voters=3+nonvoters=4,interval="+d)
		}
	}
	rate := nvEnvFloat(b, "CONCORD_BENCH_NONVOTERS_RATE")
	nice := os.Getenv("CONCORD_BENCH_NONVOTERS_NICE") != "0"
	// Each arm is one system measured one way; the first is the baseline.
	var arms []nvArm
	for k, sys := range systems {
		arms = append(arms, nvArm{sys: sys, label: labels[k]})
		if nice && len(sys.pc.Procs()) > len(sys.voters) {
			arms = append(arms, nvArm{sys: sys, label: labels[k] + ",nonvoters-nice19", nice: true})
		}
	}
	if os.Getenv("CONCORD_BENCH_NONVOTERS_NOPROBES") == "1" {
		for k, sys := range systems {
			if len(sys.nvClients) > 0 {
				arms = append(arms, nvArm{sys: sys, label: labels[k] + ",no-probes", noProbes: true})
			}
		}
	}
	if os.Getenv("CONCORD_BENCH_NONVOTERS_STOPPED") != "" {
		arms = append(arms, nvArm{sys: systems[1], label: labels[1] + ",nonvoters-stopped", stop: true})
	}
	rounds, paired := nvRoundsFromEnv(b)
	window := nvWindowFromEnv(b, paired)
	for _, clients := range nvClientsFromEnv(b) {
		results := make([][]nvResult, len(arms))
		var windows []nvWindowResult // in the order run
		for _, slot := range nvSchedule(len(arms), rounds, paired) {
			k, round, arm := slot.arm, slot.round, arms[slot.arm]
			b.Run(fmt.Sprintf("%s/map-update/clients=%d/round=%d", arm.label, clients, round+1), func(b *testing.B) {
				if arm.stop {
					arm.sys.stopNonvoters(b)
					defer arm.sys.contNonvoters(b)
				}
				if arm.nice {
					arm.sys.niceNonvoters(b, 19)
					defer arm.sys.niceNonvoters(b, 0)
				}
				var prof string
				if pprofDir != "" {
					prof = filepath.Join(pprofDir, strings.NewReplacer("=", "", "+", "-", ",", "-", "@", "-").Replace(
						fmt.Sprintf("leader-%s-c%d-r%d.pprof", arm.label, clients, round+1)))
				}
				r := arm.sys.measure(b, clients, rate, window, prof, !arm.noProbes)
				results[k] = append(results[k], r)
				windows = append(windows, nvWindowResult{arm: k, r: r})
				b.ReportMetric(r.rate, "writes/s")
				b.ReportMetric(ms(r.p50), "p50-ms")
				b.ReportMetric(ms(r.p99), "p99-ms")
				b.ReportMetric(r.leaderCPU, "leader-cpu-ms/kwrite")
				b.ReportMetric(r.serversCPU, "servers-cpu-ms/kwrite")
				b.ReportMetric(r.nonvoterCPU, "nonvoters-cpu-ms/kwrite")
				b.ReportMetric(r.nonvoterAppends, "nonvoter-appends/kwrite")
				if r.nvRW50 > 0 {
					b.ReportMetric(ms(r.nvRW50), "nv-rw-p50-ms")
					b.ReportMetric(ms(r.nvRW99), "nv-rw-p99-ms")
				}
			})
		}
		base := medianResult(results[0])
		summary := []string{fmt.Sprintf("medians of %d windows of %s (baseline: %d):", rounds, window, len(results[0]))}
		for k, arm := range arms {
			m := medianResult(results[k])
			summary = append(summary, fmt.Sprintf(
				"  %-48s %6.0f writes/s (x%.2f)  p50 %6.2f ms (x%.2f)  p99 %6.2f ms (x%.2f)  leader %4.0f cpu-ms/kwrite (x%.2f)  non-voters %4.1f cpu-ms/kwrite, %4.1f appends/kwrite each  nv-rw p50 %5.1f p99 %5.1f ms",
				arm.label, m.rate, m.rate/base.rate, ms(m.p50), ms(m.p50)/ms(base.p50), ms(m.p99), ms(m.p99)/ms(base.p99),
				m.leaderCPU, m.leaderCPU/base.leaderCPU, m.nonvoterCPU, m.nonvoterAppends, ms(m.nvRW50), ms(m.nvRW99)))
		}
		// One sub-benchmark per summary: the testing package cuts a
		// benchmark's log after a few lines.
		b.Run(fmt.Sprintf("summary/clients=%d", clients), func(b *testing.B) { b.Log("\n" + strings.Join(summary, "\n")) })
		for k, arm := range arms[1:] {
			b.Run(fmt.Sprintf("summary-paired/clients=%d/%s", clients, arm.label), func(b *testing.B) {
				b.Log("\nratios to the mean of the baseline windows beside each window (paired), and to the one before (single): median [min q1 q3 max] over n" +
					nvPairedSummary(windows, k+1))
			})
		}
	}
	b.Run("summary/rss", func(b *testing.B) {
		for k, sys := range systems {
			b.Logf("%s: RSS per process (MB) %.0f", labels[k], sys.rss(b))
		}
	})
}

// nvArm is one system measured one way: as is, with its non-voters at
// the lowest CPU priority, or with them stopped.
type nvArm struct {
	sys      *nvSystem
	label    string
	nice     bool
	stop     bool
	noProbes bool // the read-your-writes probes on the non-voters stay idle
}

// nvClientsFromEnv returns the loads (clients per window) to run.
func nvClientsFromEnv(b *testing.B) []int {
	v := os.Getenv("CONCORD_BENCH_NONVOTERS_CLIENTS")
	if v == "" {
		return []int{8, 64}
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 64 {
			b.Fatalf("CONCORD_BENCH_NONVOTERS_CLIENTS=%q: want counts of 1..64", v)
		}
		out = append(out, n)
	}
	return out
}

// nvEnvFloat returns the positive number in env var name, or 0 if unset.
func nvEnvFloat(b *testing.B, name string) float64 {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return f
}

// nvSystem is one running system with its clients, each registered as
// its own agent.
type nvSystem struct {
	pc      *ProcCluster
	voters  []int
	clients []*Client
	agents  []string
	// nvClients has one client per non-voter, connected to it, and
	// nvAgents their agents: the read-your-writes probes.
	nvClients []*Client
	nvAgents  []string
	// stopped: the non-voters are stopped (SIGSTOP) and answer nothing.
	stopped bool
}

// startNVSystem starts n server processes with --raft-voters 3 and
// connects 64 clients, spread over the voters.
func startNVSystem(b *testing.B, n int, extra []string, opts ...ProcOption) *nvSystem {
	args := append([]string{"--raft-voters", "3", "--log-level", "warn"}, extra...)
	pc := StartProcs(b, n, append(opts, WithProcArgs(func(int) []string { return args }))...)
	sys := &nvSystem{pc: pc}
	Eventually(b, MembershipTimeout, func() error {
		var err error
		sys.voters, err = procVoters(pc, n)
		return err
	})
	for k := range 64 {
		c := pc.Connect(b, sys.voters[k%len(sys.voters)], map[string]any{"participantType": "system"})
		agent := fmt.Sprintf("nv-%d", k)
		if err := c.Register(agent, nil); err != nil {
			b.Fatalf("register: %s", Describe(err))
		}
		sys.clients, sys.agents = append(sys.clients, c), append(sys.agents, agent)
	}
	for i := range pc.Procs() {
		if slices.Contains(sys.voters, i) {
			continue
		}
		c := pc.Connect(b, i, map[string]any{"participantType": "system"})
		agent := fmt.Sprintf("nv-probe-%d", i)
		if err := c.Register(agent, nil); err != nil {
			b.Fatalf("register through a non-voter: %s", Describe(err))
		}
		sys.nvClients, sys.nvAgents = append(sys.nvClients, c), append(sys.nvAgents, agent)
	}
	return sys
}

// nvResult is one window's figures; CPU is in ms per 1000 writes,
// nonvoterAppends in log writes per non-voter per 1000 writes (each one
// AppendEntries from the leader and one fsync on the non-voter).
type nvResult struct {
	rate, leaderCPU, nonvoterCPU, nonvoterAppends float64
	// serversCPU is every server's CPU together per 1000 writes: when the
	// servers are what limits the rate, its inverse ratio is the rate
	// ratio a machine given to them alone would show, whatever share of
	// this one other work took during the window.
	serversCPU     float64
	p50, p99       time.Duration
	nvRW50, nvRW99 time.Duration // read-your-writes probes through non-voters
}

// measure runs the first clients doing writes for d, rate writes/s in all
// when rate > 0 (else as fast as they go), and the read-your-writes
// probes on the non-voters when probes is set; with prof set it
// saves a CPU profile of the leader over the window there, and one of a
// non-voter beside it (leader- in the name replaced by nonvoter-).
func (s *nvSystem) measure(b *testing.B, clients int, rate float64, d time.Duration, prof string, probes bool) nvResult {
	states := []string{"busy", "idle"}
	lat := make([][]time.Duration, clients)
	var failed atomic.Int64
	var profiled []*Proc // the leader, then a non-voter if any
	if prof != "" {
		profiled = append(profiled, s.pc.Leader(b))
		for i, p := range s.pc.Procs() {
			if !s.stopped && !slices.Contains(s.voters, i) {
				profiled = append(profiled, p)
				break
			}
		}
	}
	logs0 := s.nonvoterLogWrites(b)
	cpu0 := procsCPU(b, s.pc)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for k, p := range profiled {
		path := prof
		if k > 0 {
			path = strings.Replace(prof, "leader-", "nonvoter-", 1)
		}
		wg.Go(func() { s.profile(b, p, d-time.Second, path) })
	}
	for w := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				if rate > 0 {
					// Client w's i-th write is due at (i*clients+w)/rate.
					due := start.Add(time.Duration(float64(i*clients+w) / rate * float64(time.Second)))
					if !due.Before(deadline) {
						break
					}
					time.Sleep(time.Until(due))
				}
				t0 := time.Now()
				if _, err := s.clients[w].Call("map/agents/update", map[string]any{"agentId": s.agents[w], "state": states[i%2]}); err != nil {
					failed.Add(1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	nvLat := make([][]time.Duration, len(s.nvClients))
	if probes && !s.stopped {
		for k, c := range s.nvClients {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					t0 := time.Now()
					if _, err := c.Call("map/agents/update", map[string]any{"agentId": s.nvAgents[k], "state": states[i%2]}); err != nil {
						failed.Add(1)
						continue
					}
					if _, err := c.Call("map/agents/get", map[string]any{"agentId": s.nvAgents[k]}); err != nil {
						failed.Add(1)
						continue
					}
					nvLat[k] = append(nvLat[k], time.Since(t0))
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1 := procsCPU(b, s.pc)
	logs1 := s.nonvoterLogWrites(b)
	reportFailures(b, failed.Load())
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	r := nvResult{rate: float64(len(all)) / elapsed.Seconds()}
	r.p50, r.p99 = percentiles(all)
	var nvAll []time.Duration
	for _, l := range nvLat {
		nvAll = append(nvAll, l...)
	}
	if len(nvAll) > 0 {
		r.nvRW50, r.nvRW99 = percentiles(nvAll)
	}
	// The busiest voter is the leader; CPU per write is what the design
	// costs whatever the shared machine does to the rates.
	var leader, nonvoters, servers time.Duration
	for i := range cpu1 {
		dt := cpu1[i] - cpu0[i]
		servers += dt
		if slices.Contains(s.voters, i) {
			leader = max(leader, dt)
		} else {
			nonvoters += dt
		}
	}
	if k := float64(len(all)) / 1000; k > 0 {
		r.leaderCPU = float64(leader.Milliseconds()) / k
		r.nonvoterCPU = float64(nonvoters.Milliseconds()) / k
		r.serversCPU = float64(servers.Milliseconds()) / k
		if n := len(s.pc.Procs()) - len(s.voters); n > 0 {
			r.nonvoterAppends = float64(logs1-logs0) / float64(n) / k
		}
	}
	return r
}

// nonvoterLogWrites returns the log writes (log_store_batches) of all
// non-voters together so far.
func (s *nvSystem) nonvoterLogWrites(b *testing.B) uint64 {
	var sum uint64
	for i := range s.pc.Procs() {
		if s.stopped || slices.Contains(s.voters, i) {
			continue
		}
		st, err := s.pc.Status(i)
		if err != nil {
			b.Fatalf("status of %s: %v", s.pc.Proc(i), err)
		}
		n, err := strconv.ParseUint(st.Raft["log_store_batches"], 10, 64)
		if err != nil {
			b.Fatalf("log_store_batches of %s: %q", s.pc.Proc(i), st.Raft["log_store_batches"])
		}
		sum += n
	}
	return sum
}

// profile saves a CPU profile of p over d to path (pprof format).
func (s *nvSystem) profile(b *testing.B, p *Proc, d time.Duration, path string) {
	c := &http.Client{Timeout: d + 10*time.Second, Transport: &http.Transport{TLSClientConfig: OperatorTLS()}}
	defer c.CloseIdleConnections()
	code, body, err := getWith(c, p.HTTPAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())))
	if err != nil || code != http.StatusOK {
		b.Errorf("profile of %s: %d %v", p, code, err)
		return
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		b.Errorf("save profile of %s: %v", p, err)
	}
}

// niceNonvoters sets the nice value of every thread of every non-voter
// process. Linux keeps nice per thread (setpriority on a PID reaches only
// its main thread); threads the Go runtime starts later inherit it from
// the thread that starts them, all of which are set here.
func (s *nvSystem) niceNonvoters(b *testing.B, nice int) {
	for i, p := range s.pc.Procs() {
		if slices.Contains(s.voters, i) {
			continue
		}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", procPID(p)))
		if err != nil {
			b.Fatalf("threads of %s: %v", p, err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// A thread may exit meanwhile (ESRCH): nothing to set.
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
				b.Fatalf("nice %d on thread %d of %s: %v", nice, tid, p, err)
			}
		}
	}
}

// stopNonvoters stops every non-voter process (SIGSTOP).
func (s *nvSystem) stopNonvoters(b *testing.B) {
	s.signalNonvoters(b, syscall.SIGSTOP)
	s.stopped = true
}

// contNonvoters resumes the non-voters and waits until each answers
// /v1/status again.
func (s *nvSystem) contNonvoters(b *testing.B) {
	s.signalNonvoters(b, syscall.SIGCONT)
	s.stopped = false
	for i := range s.pc.Procs() {
		if !slices.Contains(s.voters, i) {
			Eventually(b, MembershipTimeout, func() error { _, err := s.pc.Status(i); return err })
		}
	}
}

func (s *nvSystem) signalNonvoters(b *testing.B, sig syscall.Signal) {
	for i, p := range s.pc.Procs() {
		if slices.Contains(s.voters, i) {
			continue
		}
		if err := syscall.Kill(procPID(p), sig); err != nil {
			b.Fatalf("%v to %s: %v", sig, p, err)
		}
	}
}

// rss returns each server's resident memory in MB.
func (s *nvSystem) rss(b *testing.B) []float64 {
	var out []float64
	for _, p := range s.pc.Procs() {
		code, body, err := httpGet(p.HTTPAddr, "/v1/status")
		var st struct {
			RSS int64 `json:"rssBytes"`
		}
		if err != nil || code != 200 || json.Unmarshal(body, &st) != nil {
			b.Fatalf("status of %s: %d %v", p, code, err)
		}
		out = append(out, float64(st.RSS)/(1<<20))
	}
	return out
}

// medianResult takes the median of each figure separately.
func medianResult(rs []nvResult) nvResult {
	med := func(f func(nvResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return nvResult{
		rate:            med(func(r nvResult) float64 { return r.rate }),
		leaderCPU:       med(func(r nvResult) float64 { return r.leaderCPU }),
		serversCPU:      med(func(r nvResult) float64 { return r.serversCPU }),
		nonvoterCPU:     med(func(r nvResult) float64 { return r.nonvoterCPU }),
		nonvoterAppends: med(func(r nvResult) float64 { return r.nonvoterAppends }),
		p50:             time.Duration(med(func(r nvResult) float64 { return float64(r.p50) })),
		p99:             time.Duration(med(func(r nvResult) float64 { return float64(r.p99) })),
		nvRW50:          time.Duration(med(func(r nvResult) float64 { return float64(r.nvRW50) })),
		nvRW99:          time.Duration(med(func(r nvResult) float64 { return float64(r.nvRW99) })),
	}
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
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", procPID(p)))
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

// procPID returns the PID of p's current process.
func procPID(p *Proc) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100
