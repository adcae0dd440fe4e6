package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concordmap/concord/node/cluster"
)

// autopilotCollector exports the leader's autopilot report (what concord
// operator health shows), as Consul's autopilot.healthy and
// autopilot.failure_tolerance: the series an operator alerts on before a
// second failure costs the quorum. Only the leader exports them (another
// node's last report, from when it led, would be stale), so aggregate
// across nodes (max) in queries.
type autopilotCollector struct {
	isLeader  func() bool
	report    func() (cluster.HealthReport, bool)
	healthy   *prometheus.Desc
	tolerance *prometheus.Desc
	voters    *prometheus.Desc
	servers   *prometheus.Desc
}

func newAutopilotCollector(nodeID string, isLeader func() bool, report func() (cluster.HealthReport, bool)) *autopilotCollector {
	labels := prometheus.Labels{"node_id": nodeID}
	return &autopilotCollector{
		isLeader: isLeader,
		report:   report,
		healthy: prometheus.NewDesc("concord_autopilot_healthy",
			"1 when every server of the Raft configuration is healthy (alive, in contact with the leader, caught up); exported by the leader.", nil, labels),
		tolerance: prometheus.NewDesc("concord_autopilot_failure_tolerance",
			"How many more voters may fail with a quorum left (healthy voters minus a quorum); exported by the leader.", nil, labels),
		voters: prometheus.NewDesc("concord_autopilot_voters",
			"Raft voters: configured, healthy, and the --raft-voters target; exported by the leader.", []string{"kind"}, labels),
		servers: prometheus.NewDesc("concord_autopilot_servers",
			"Servers of the Raft configuration by role (voter, non-voter) and health; exported by the leader.", []string{"role", "healthy"}, labels),
	}
}

func (c *autopilotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.healthy
	ch <- c.tolerance
	ch <- c.voters
	ch <- c.servers
}

func (c *autopilotCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.isLeader() {
		return
	}
	rep, ok := c.report()
	if !ok {
		return
	}
	healthy := 0.0
	if rep.Healthy {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, healthy)
	ch <- prometheus.MustNewConstMetric(c.tolerance, prometheus.GaugeValue, float64(rep.FailureTolerance))
	counts := map[[2]string]int{
		{"voter", "true"}: 0, {"voter", "false"}: 0, {"non-voter", "true"}: 0, {"non-voter", "false"}: 0,
	}
	voters, healthyVoters := 0, 0
	for _, s := range rep.Servers {
		role, h := "non-voter", "false"
		if s.Healthy {
			h = "true"
		}
		if s.Voter {
			role = "voter"
			voters++
			if s.Healthy {
				healthyVoters++
			}
		}
		counts[[2]string{role, h}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.servers, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(voters), "configured")
	ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(healthyVoters), "healthy")
	ch <- prometheus.MustNewConstMetric(c.voters, prometheus.GaugeValue, float64(rep.TargetVoters), "target")
}
