package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concordmap/concord/federation"
)

// fedCollector exports each link's figures as this node sees them
// (federation.md §4: state, RTT, queue depth and bytes, sent, received,
// dropped, reconnects), read from the manager at scrape time.
type fedCollector struct {
	m *federation.Manager
}

var (
	fedLabels     = []string{"peer"}
	fedUp         = prometheus.NewDesc("concord_federation_link_up", "1 when this node's stream to the peer system is up.", fedLabels, nil)
	fedStreams    = prometheus.NewDesc("concord_federation_streams", "Streams open with the peer system on this node (outbound plus inbound).", fedLabels, nil)
	fedRTT        = prometheus.NewDesc("concord_federation_rtt_seconds", "Last measured round trip on this node's stream to the peer.", fedLabels, nil)
	fedQueue      = prometheus.NewDesc("concord_federation_queue_messages", "Messages waiting in this node's outage buffer for the peer.", fedLabels, nil)
	fedQueueBytes = prometheus.NewDesc("concord_federation_queue_bytes", "Bytes waiting in this node's outage buffer for the peer.", fedLabels, nil)
	fedSent       = prometheus.NewDesc("concord_federation_sent_total", "Envelopes this node sent to the peer.", fedLabels, nil)
	fedReceived   = prometheus.NewDesc("concord_federation_received_total", "Envelopes this node received from the peer.", fedLabels, nil)
	fedDropped    = prometheus.NewDesc("concord_federation_dropped_total", "Envelopes this node dropped from its outage buffer for the peer.", fedLabels, nil)
	fedReconnects = prometheus.NewDesc("concord_federation_connects_total", "Streams this node opened to the peer.", fedLabels, nil)
	fedImported   = prometheus.NewDesc("concord_federation_imported_agents", "Agents imported from the peer (replicated directory).", fedLabels, nil)
	fedOutbox     = prometheus.NewDesc("concord_federation_outbox_messages", "Guaranteed messages in the replicated outbox, waiting for the peer's acknowledgement.", fedLabels, nil)
	fedOutboxB    = prometheus.NewDesc("concord_federation_outbox_bytes", "Bytes of guaranteed messages in the replicated outbox.", fedLabels, nil)
	fedProxies    = prometheus.NewDesc("concord_federation_map_proxies", "Proxy sessions up on the foreign MAP server (map links, on their holder).", fedLabels, nil)
	fedInErrors   = prometheus.NewDesc("concord_federation_map_inbound_errors_total", "Messages from the foreign MAP server this node dropped (malformed, oversized, not exported, undeliverable).", fedLabels, nil)
	fedDirect     = prometheus.NewDesc("concord_federation_direct_streams", "Direct streams up from this node to the peer's servers holding target agents.", fedLabels, nil)
	fedDirectSent = prometheus.NewDesc("concord_federation_direct_sent_total", "Envelopes this node sent to the peer on direct streams (part of sent).", fedLabels, nil)
	fedDirectRecv = prometheus.NewDesc("concord_federation_direct_received_total", "Envelopes this node received from the peer on its direct streams (part of received).", fedLabels, nil)
	fedGwBound    = prometheus.NewDesc("concord_federation_gateway_bound", "1 for each foreign system an SDK gateway session serves (replicated bindings).", []string{"peer", "session_id"}, nil)
	fedGwIn       = prometheus.NewDesc("concord_federation_gateway_routed_in_total", "map/federation/route calls this node accepted from SDK gateways.", nil, nil)
	fedGwOut      = prometheus.NewDesc("concord_federation_gateway_routed_out_total", "Messages this node handed to SDK gateway sessions.", nil, nil)
	fedGwRefused  = prometheus.NewDesc("concord_federation_gateway_refused_total", "map/federation/route calls this node refused, by MAP error code.", []string{"code"}, nil)
	fedGwUnbound  = prometheus.NewDesc("concord_federation_gateway_unbound_total", "Gateway bindings this node dropped as leader because their session ended.", nil, nil)
)

func (c fedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fedUp, fedStreams, fedRTT, fedQueue, fedQueueBytes, fedSent, fedReceived, fedDropped, fedReconnects, fedImported, fedOutbox, fedOutboxB, fedProxies, fedInErrors, fedDirect, fedDirectSent, fedDirectRecv, fedGwBound, fedGwIn, fedGwOut, fedGwRefused, fedGwUnbound} {
		ch <- d
	}
}

func (c fedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.m.Status() {
		p := st.GetLink().GetPeerSystemId()
		up := 0.0
		if st.GetState() == "up" {
			up = 1
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, p)
		}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), p)
		}
		gauge(fedUp, up)
		gauge(fedStreams, float64(st.GetStreamsUp()))
		gauge(fedRTT, float64(st.GetRttUs())/1e6)
		gauge(fedQueue, float64(st.GetQueueDepth()))
		gauge(fedQueueBytes, float64(st.GetQueueBytes()))
		gauge(fedImported, float64(st.GetImportedAgents()))
		gauge(fedOutbox, float64(st.GetOutboxDepth()))
		gauge(fedOutboxB, float64(st.GetOutboxBytes()))
		counter(fedSent, st.GetSent())
		counter(fedReceived, st.GetReceived())
		counter(fedDropped, st.GetDropped())
		counter(fedReconnects, st.GetReconnects())
		gauge(fedDirect, float64(st.GetDirectStreams()))
		counter(fedDirectSent, st.GetDirectSent())
		counter(fedDirectRecv, st.GetDirectReceived())
		if federation.IsMapLink(st.GetLink()) {
			gauge(fedProxies, float64(st.GetProxiesUp()))
			counter(fedInErrors, st.GetInboundErrors())
		}
	}
	c.collectGateways(ch)
}

// collectGateways exports the SDK gateway bindings and this node's
// gateway counters.
func (c fedCollector) collectGateways(ch chan<- prometheus.Metric) {
	for _, b := range c.m.Gateways() {
		ch <- prometheus.MustNewConstMetric(fedGwBound, prometheus.GaugeValue, 1, b.GetSystemId(), b.GetSessionId())
	}
	st := c.m.GatewayStats()
	ch <- prometheus.MustNewConstMetric(fedGwIn, prometheus.CounterValue, float64(st.RoutedIn))
	ch <- prometheus.MustNewConstMetric(fedGwOut, prometheus.CounterValue, float64(st.RoutedOut))
	ch <- prometheus.MustNewConstMetric(fedGwUnbound, prometheus.CounterValue, float64(st.Unbound))
	for code, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(fedGwRefused, prometheus.CounterValue, float64(n), strconv.Itoa(code))
	}
}
