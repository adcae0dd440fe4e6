package admin

import (
	"context"

	"github.com/concordmap/concord/federation"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// LinksJSON is a node's federation links as JSON: the body of GET
// /v1/federation/links and of `concord federation status --json`, built
// by one function (NewLinksJSON) so the two never differ. Its members
// are in the order the endpoint always wrote them (alphabetical).
type LinksJSON struct {
	Gateways []GatewayJSON `json:"gateways"`
	Links    []LinkJSON    `json:"links"`
	NodeID   string        `json:"nodeId"`
	SystemID string        `json:"systemId"`
	// PendingUnlinks are links removed here whose peer has not yet
	// confirmed (the admin ListLinks answer carries them).
	PendingUnlinks []PendingUnlinkJSON `json:"pendingUnlinks,omitempty"`
}

// LinkJSON is one link as this node sees it: what `concord federation
// status` shows plus the link's policies. It carries no secrets: token
// material never reaches a link, and the peer's CA certificate is reduced
// to whether the link has one (tls).
type LinkJSON struct {
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

// GatewayJSON is one SDK gateway binding: the gateway session that a
// foreign system's messages go to.
type GatewayJSON struct {
	SystemID      string `json:"systemId"`
	SessionID     string `json:"sessionId"`
	ParticipantID string `json:"participantId"`
	BoundAtMs     int64  `json:"boundAtMs"`
}

// PendingUnlinkJSON is a link removed here, waiting for the peer's
// confirmation since removedAtMs.
type PendingUnlinkJSON struct {
	PeerSystemID string `json:"peerSystemId"`
	RemovedAtMs  int64  `json:"removedAtMs"`
}

// NewLinksJSON renders a ListLinks answer (or the same parts, read from
// the node's federation manager) as JSON.
func NewLinksJSON(res *concordv1.ListLinksResponse) LinksJSON {
	out := LinksJSON{SystemID: res.GetSystemId(), NodeID: res.GetNodeId(),
		Links: make([]LinkJSON, 0, len(res.GetLinks())), Gateways: make([]GatewayJSON, 0, len(res.GetGateways()))}
	for _, b := range res.GetGateways() {
		out.Gateways = append(out.Gateways, GatewayJSON{SystemID: b.GetSystemId(), SessionID: b.GetSessionId(),
			ParticipantID: b.GetParticipantId(), BoundAtMs: b.GetBoundAtMs()})
	}
	for _, p := range res.GetPendingUnlinks() {
		out.PendingUnlinks = append(out.PendingUnlinks, PendingUnlinkJSON{PeerSystemID: p.GetLink().GetPeerSystemId(), RemovedAtMs: p.GetRemovedAtMs()})
	}
	for _, st := range res.GetLinks() {
		l := st.GetLink()
		kind, url := "concord", ""
		if federation.IsMapLink(l) {
			kind, url = "map", federation.RedactURL(l.GetMap().GetUrl())
		}
		out.Links = append(out.Links, LinkJSON{
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
	return out
}

// ListLinksJSON is ListLinks as LinksJSON.
func (c *Client) ListLinksJSON(ctx context.Context) (LinksJSON, error) {
	res, err := c.fed.ListLinks(ctx, &concordv1.ListLinksRequest{})
	if err != nil {
		return LinksJSON{}, err
	}
	return NewLinksJSON(res), nil
}
