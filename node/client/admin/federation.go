package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/concordmap/concord/federation"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Policy is a link's export or import policy (none, all, role:R, name:GLOB,
// tag:T). The zero Policy is unset: the node applies its default.
type Policy struct{ p *concordv1.FedPolicy }

// ParsePolicy parses the text form of a policy.
func ParsePolicy(s string) (Policy, error) {
	p, err := federation.ParsePolicy(s)
	return Policy{p}, err
}

// String is the text form ParsePolicy reads.
func (p Policy) String() string { return federation.FormatPolicy(p.p) }

// Overflow names what a full outage buffer does.
const (
	DropOldest = "drop-oldest"
	DropNewest = "drop-newest"
	RejectNew  = "reject-new"
)

var overflows = map[string]concordv1.FedOverflow{
	DropOldest: concordv1.FedOverflow_FED_OVERFLOW_DROP_OLDEST,
	DropNewest: concordv1.FedOverflow_FED_OVERFLOW_DROP_NEWEST,
	RejectNew:  concordv1.FedOverflow_FED_OVERFLOW_REJECT_NEW,
}

// ValidOverflow reports whether name is DropOldest, DropNewest or RejectNew.
func ValidOverflow(name string) bool { _, ok := overflows[name]; return ok }

// overflowName is the name of o, "default" when unset or unknown.
func overflowName(o concordv1.FedOverflow) string {
	for k, v := range overflows {
		if v == o {
			return k
		}
	}
	return "default"
}

// Buffer is a link's outage buffer policy, per node.
type Buffer struct {
	MaxMessages uint32
	MaxBytes    uint64
	MaxAge      time.Duration // whole milliseconds on the wire
	Overflow    string        // DropOldest, DropNewest, RejectNew; "default" when read back unset
}

func (b Buffer) proto() (*concordv1.FedBufferPolicy, error) {
	ov, ok := overflows[b.Overflow]
	if !ok {
		return nil, fmt.Errorf("buffer overflow %q: want drop-oldest, drop-newest or reject-new", b.Overflow)
	}
	return &concordv1.FedBufferPolicy{MaxMessages: b.MaxMessages, MaxBytes: b.MaxBytes,
		MaxAgeMs: b.MaxAge.Milliseconds(), Overflow: ov}, nil
}

// Default outbox bounds of a link (the node applies them when unset).
const (
	DefaultOutboxMessages = federation.DefaultOutboxMessages
	DefaultOutboxBytes    = federation.DefaultOutboxBytes
)

// Outbox is a link's guaranteed-delivery policy: Guaranteed makes every
// message over the link guaranteed (as meta.delivery "guaranteed" does for
// one); MaxMessages and MaxBytes bound the replicated outbox (0: the
// node's defaults).
type Outbox struct {
	Guaranteed  bool
	MaxMessages uint32
	MaxBytes    uint64
}

func (o Outbox) proto() *concordv1.FedOutboxPolicy {
	if o == (Outbox{}) {
		return nil
	}
	return &concordv1.FedOutboxPolicy{Guaranteed: o.Guaranteed, MaxMessages: o.MaxMessages, MaxBytes: o.MaxBytes}
}

// LinkSettings are the policies one side sets for a link.
type LinkSettings struct {
	Export, Import Policy
	Transitive     bool   // let messages cross the link on their way to a third system
	MaxHops        uint32 // hop bound of envelopes this system originates
	Buffer         Buffer
	Outbox         Outbox
}

// Link is a link between this system and a peer system.
type Link struct {
	PeerSystemID string
	PeerAddrs    []string
	LinkSettings
	HasPeerCA bool // the peer's CA is pinned: the link uses TLS
	// Kind is "concord" or "map". A map link has URL (without secrets) and
	// Auth (the method only) instead of PeerAddrs.
	Kind, URL, Auth string
	// Holder is the node holding a map link's connection ("" until chosen).
	Holder string
}

// LinkStatus is a link as one node sees it.
type LinkStatus struct {
	Link
	State               string
	StreamsUp           uint32
	ConnectedTo         string
	RTT                 time.Duration
	QueueDepth          uint32
	QueueBytes          uint64
	Sent, Received      uint64
	Dropped, Reconnects uint64
	ImportedAgents      uint32
	ImportedVersion     uint64
	// OutboxDepth and OutboxBytes are the guaranteed messages waiting
	// for the peer's acknowledgement (replicated: the same on every node).
	OutboxDepth uint32
	OutboxBytes uint64
	// ProxiesUp and InboundErrors are a map link's, on its holder.
	ProxiesUp     uint32
	InboundErrors uint64
	// DirectStreams are this node's direct streams up to the peer's
	// servers holding target agents; DirectSent and DirectReceived count
	// the envelopes on direct streams (part of Sent and Received).
	DirectStreams              uint32
	DirectSent, DirectReceived uint64
}

// PendingUnlink is a link removed here whose peer has not yet confirmed
// removing its side; the leader keeps telling it.
type PendingUnlink struct {
	PeerSystemID string
	RemovedAt    time.Time
}

// GatewayBinding says which SDK gateway session (map/federation/route)
// serves a foreign system: messages to that system go to it.
type GatewayBinding struct {
	SystemID, SessionID, ParticipantID string
	BoundAt                            time.Time
}

// Links is the answer of ListLinks: the links and who answered.
type Links struct {
	SystemID, NodeID string
	Links            []LinkStatus
	PendingUnlinks   []PendingUnlink
	Gateways         []GatewayBinding
}

// CreatePeeringToken issues a one-time peering token for peerSystemID, redeemable
// for ttl.
func (c *Client) CreatePeeringToken(ctx context.Context, peerSystemID string, ttl time.Duration, s LinkSettings) (string, error) {
	buf, err := s.Buffer.proto()
	if err != nil {
		return "", err
	}
	res, err := c.fed.CreateToken(ctx, &concordv1.CreateTokenRequest{PeerSystemId: peerSystemID, TtlMs: ttl.Milliseconds(),
		Export: s.Export.p, Import: s.Import.p, Transitive: s.Transitive, Buffer: buf, MaxHops: s.MaxHops, Outbox: s.Outbox.proto()})
	if err != nil {
		return "", err
	}
	return res.GetToken(), nil
}

// CreateLink redeems a peering token and returns the new link.
func (c *Client) CreateLink(ctx context.Context, token string, s LinkSettings) (Link, error) {
	buf, err := s.Buffer.proto()
	if err != nil {
		return Link{}, err
	}
	res, err := c.fed.CreateLink(ctx, &concordv1.CreateLinkRequest{Token: token,
		Export: s.Export.p, Import: s.Import.p, Transitive: s.Transitive, MaxHops: s.MaxHops, Buffer: buf, Outbox: s.Outbox.proto()})
	if err != nil {
		return Link{}, err
	}
	return link(res.GetLink()), nil
}

// ListLinks lists this system's links as the node sees them.
func (c *Client) ListLinks(ctx context.Context) (Links, error) {
	res, err := c.fed.ListLinks(ctx, &concordv1.ListLinksRequest{})
	if err != nil {
		return Links{}, err
	}
	out := Links{SystemID: res.GetSystemId(), NodeID: res.GetNodeId(), Links: make([]LinkStatus, 0, len(res.GetLinks()))}
	for _, st := range res.GetLinks() {
		out.Links = append(out.Links, LinkStatus{Link: link(st.GetLink()), State: st.GetState(), StreamsUp: st.GetStreamsUp(),
			ConnectedTo: st.GetConnectedTo(), RTT: time.Duration(st.GetRttUs()) * time.Microsecond,
			QueueDepth: st.GetQueueDepth(), QueueBytes: st.GetQueueBytes(), Sent: st.GetSent(), Received: st.GetReceived(),
			Dropped: st.GetDropped(), Reconnects: st.GetReconnects(), ImportedAgents: st.GetImportedAgents(),
			ImportedVersion: st.GetImportedVersion(), OutboxDepth: st.GetOutboxDepth(), OutboxBytes: st.GetOutboxBytes(),
			ProxiesUp: st.GetProxiesUp(), InboundErrors: st.GetInboundErrors(),
			DirectStreams: st.GetDirectStreams(), DirectSent: st.GetDirectSent(), DirectReceived: st.GetDirectReceived()})
	}
	for _, p := range res.GetPendingUnlinks() {
		out.PendingUnlinks = append(out.PendingUnlinks, PendingUnlink{PeerSystemID: p.GetLink().GetPeerSystemId(),
			RemovedAt: time.UnixMilli(p.GetRemovedAtMs())})
	}
	for _, g := range res.GetGateways() {
		out.Gateways = append(out.Gateways, GatewayBinding{SystemID: g.GetSystemId(), SessionID: g.GetSessionId(),
			ParticipantID: g.GetParticipantId(), BoundAt: time.UnixMilli(g.GetBoundAtMs())})
	}
	return out, nil
}

// Unlinked is the answer of Unlink: whether the peer removed its side too.
type Unlinked struct {
	PeerNotified bool
	PeerError    string // why the peer was not reached
	// Pending: the system keeps telling the peer until it confirms.
	Pending bool
	// MapLink: the link was to a foreign MAP server (it keeps no side).
	MapLink bool
}

// Unlink removes the link to peerSystemID on this side and tells the peer;
// when the peer is not reached the system retries until it confirms.
// force removes without retrying, and drops a pending unlink of a link
// already removed (the peer is gone for good).
func (c *Client) Unlink(ctx context.Context, peerSystemID string, force bool) (Unlinked, error) {
	res, err := c.fed.Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: peerSystemID, Force: force})
	if err != nil {
		return Unlinked{}, err
	}
	return Unlinked{PeerNotified: res.GetPeerNotified(), PeerError: res.GetPeerError(), Pending: res.GetPending(),
		MapLink: res.GetMapLink()}, nil
}

func link(l *concordv1.FedLink) Link {
	b := l.GetBuffer()
	kind, url, auth := "concord", "", ""
	if federation.IsMapLink(l) {
		kind, url, auth = "map", federation.RedactURL(l.GetMap().GetUrl()), l.GetMap().GetAuth().GetMethod()
		if auth == "" {
			auth = "none"
		}
	}
	return Link{PeerSystemID: l.GetPeerSystemId(), PeerAddrs: l.GetPeerAddrs(), HasPeerCA: len(l.GetPeerCaPem()) > 0 || len(l.GetMap().GetCaPem()) > 0,
		Kind: kind, URL: url, Auth: auth, Holder: l.GetMap().GetHolderNodeId(),
		LinkSettings: LinkSettings{Export: Policy{l.GetExport()}, Import: Policy{l.GetImport()},
			Transitive: l.GetTransitive(), MaxHops: l.GetMaxHops(),
			Buffer: Buffer{MaxMessages: b.GetMaxMessages(), MaxBytes: b.GetMaxBytes(),
				MaxAge: time.Duration(b.GetMaxAgeMs()) * time.Millisecond, Overflow: overflowName(b.GetOverflow())},
			Outbox: Outbox{Guaranteed: l.GetOutbox().GetGuaranteed(), MaxMessages: l.GetOutbox().GetMaxMessages(),
				MaxBytes: l.GetOutbox().GetMaxBytes()}}}
}

// MapLinkSpec links a foreign MAP server.
type MapLinkSpec struct {
	SystemID string // the id this system gives the foreign system
	URL      string // ws:// or wss://
	// AuthMethod is "bearer" or "api-key" ("" with no Token: anonymous).
	AuthMethod, Token string
	CAPEM             []byte // optional: the CA of a wss:// server
	LinkSettings
}

// CreateMapLink stores a link of kind map; the answer never carries the
// token.
func (c *Client) CreateMapLink(ctx context.Context, s MapLinkSpec) (Link, error) {
	buf, err := s.Buffer.proto()
	if err != nil {
		return Link{}, err
	}
	req := &concordv1.CreateMapLinkRequest{SystemId: s.SystemID, Url: s.URL, CaPem: s.CAPEM,
		Export: s.Export.p, Import: s.Import.p, MaxHops: s.MaxHops, Buffer: buf}
	if s.AuthMethod != "" || s.Token != "" {
		req.Auth = &concordv1.FedMapAuth{Method: s.AuthMethod, Token: s.Token}
	}
	res, err := c.fed.CreateMapLink(ctx, req)
	if err != nil {
		return Link{}, err
	}
	return link(res.GetLink()), nil
}
