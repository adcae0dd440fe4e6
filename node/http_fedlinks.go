package node

import (
	"net/http"

	"github.com/concordmap/concord/federation"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fedLinkJSON is one federation link in GET /v1/federation/links: what
// `concord federation status` shows plus the link's policies. It carries
// no secrets: token material never reaches a link, and the peer's CA
// certificate is reduced to whether the link has one (tls).
type fedLinkJSON struct {
	PeerSystemID    string   `json:"peerSystemId"`
	State           string   `json:"state"` // up, connecting or down (this node's stream)
	StreamsUp       uint32   `json:"streamsUp"`
	ConnectedTo     string   `json:"connectedTo"`
	RTTMicros       int64    `json:"rttUs"`
	QueueDepth      uint32   `json:"queueDepth"`
	QueueBytes      uint64   `json:"queueBytes"`
	Sent            uint64   `json:"sent"`
	Received        uint64   `json:"received"`
	Dropped         uint64   `json:"dropped"`
	Reconnects      uint64   `json:"reconnects"`
	ImportedAgents  uint32   `json:"importedAgents"`
	ImportedVersion uint64   `json:"importedVersion"`
	OutboxDepth     uint32   `json:"outboxDepth"` // guaranteed messages waiting for the peer (replicated)
	OutboxBytes     uint64   `json:"outboxBytes"`
	Guaranteed      bool     `json:"guaranteed"` // every message over the link is guaranteed
	Export          string   `json:"export"`     // policy as the CLI takes it: none, all, role:R, name:G, tag:T
	Import          string   `json:"import"`
	Transitive      bool     `json:"transitive"`
	MaxHops         uint32   `json:"maxHops"`
	Initiator       bool     `json:"initiator"`
	PeerAddrs       []string `json:"peerAddrs"`
	TLS             bool     `json:"tls"`
	// A link of kind map: its URL without userinfo or query, the node
	// holding it, its proxies up (on the holder) and dropped inbound input.
	Kind          string `json:"kind"` // concord or map
	URL           string `json:"url,omitempty"`
	Holder        string `json:"holder,omitempty"`
	ProxiesUp     uint32 `json:"proxiesUp,omitempty"`
	InboundErrors uint64 `json:"inboundErrors,omitempty"`
	// Direct streams from this node to the peer's servers holding target
	// agents, and the envelopes on direct streams (part of sent/received).
	DirectStreams  uint32 `json:"directStreams"`
	DirectSent     uint64 `json:"directSent"`
	DirectReceived uint64 `json:"directReceived"`
}

// fedGatewayJSON is one SDK gateway binding in GET /v1/federation/links:
// the gateway session that foreign system's messages go to.
type fedGatewayJSON struct {
	SystemID      string `json:"systemId"`
	SessionID     string `json:"sessionId"`
	ParticipantID string `json:"participantId"`
	BoundAtMs     int64  `json:"boundAtMs"`
}

// handleFedLinks lists this system's federation links as this node sees
// them, from the same Manager.Status the admin ListLinks method serves.
func (s *Server) handleFedLinks(w http.ResponseWriter, _ *http.Request) {
	var links []*concordv1.FedLinkStatus
	var bindings []*concordv1.FedGatewayBinding
	if s.fed != nil {
		links, bindings = s.fed.Status(), s.fed.Gateways()
	}
	gateways := make([]fedGatewayJSON, 0, len(bindings))
	for _, b := range bindings {
		gateways = append(gateways, fedGatewayJSON{SystemID: b.GetSystemId(), SessionID: b.GetSessionId(),
			ParticipantID: b.GetParticipantId(), BoundAtMs: b.GetBoundAtMs()})
	}
	out := make([]fedLinkJSON, 0, len(links))
	for _, st := range links {
		l := st.GetLink()
		kind, url := "concord", ""
		if federation.IsMapLink(l) {
			kind, url = "map", federation.RedactURL(l.GetMap().GetUrl())
		}
		out = append(out, fedLinkJSON{
			Kind: kind, URL: url, Holder: st.GetHolderNodeId(), ProxiesUp: st.GetProxiesUp(), InboundErrors: st.GetInboundErrors(),
			PeerSystemID: l.GetPeerSystemId(), State: st.GetState(), StreamsUp: st.GetStreamsUp(),
			ConnectedTo: st.GetConnectedTo(), RTTMicros: st.GetRttUs(), QueueDepth: st.GetQueueDepth(),
			QueueBytes: st.GetQueueBytes(), Sent: st.GetSent(), Received: st.GetReceived(), Dropped: st.GetDropped(),
			Reconnects: st.GetReconnects(), ImportedAgents: st.GetImportedAgents(), ImportedVersion: st.GetImportedVersion(),
			OutboxDepth: st.GetOutboxDepth(), OutboxBytes: st.GetOutboxBytes(), Guaranteed: l.GetOutbox().GetGuaranteed(),
			Export: federation.FormatPolicy(l.GetExport()), Import: federation.FormatPolicy(l.GetImport()),
			Transitive: l.GetTransitive(), MaxHops: l.GetMaxHops(), Initiator: l.GetInitiator(),
			PeerAddrs: append([]string{}, l.GetPeerAddrs()...), TLS: len(l.GetPeerCaPem()) > 0,
			DirectStreams: st.GetDirectStreams(), DirectSent: st.GetDirectSent(), DirectReceived: st.GetDirectReceived(),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"systemId": s.cfg.SystemID, "nodeId": s.cfg.NodeID, "links": out, "gateways": gateways})
}
