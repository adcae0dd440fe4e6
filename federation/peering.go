package federation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// CreateToken issues a one-time token for system req.PeerSystemId: it
// stores the secret's hash (and the link policies this side will use) in
// Raft with an expiry, and returns the token text carrying this system's
// id, server addresses, CA certificate and the secret.
func (m *Manager) CreateToken(ctx context.Context, req *concordv1.CreateTokenRequest) (*concordv1.CreateTokenResponse, error) {
	peer := req.GetPeerSystemId()
	switch {
	case !validSystemID(peer):
		return nil, fmt.Errorf("%w: peer system id %q", ErrInvalidCommand, peer)
	case peer == m.cfg.SystemID:
		return nil, ErrSelfLink
	case req.GetTtlMs() < 0:
		return nil, fmt.Errorf("%w: negative ttl", ErrInvalidCommand)
	}
	if !m.cfg.Plaintext && m.cfg.Credentials == nil {
		return nil, ErrTLSRequired
	}
	ttl := m.cfg.TokenTTL
	if req.GetTtlMs() > 0 {
		ttl = time.Duration(req.GetTtlMs()) * time.Millisecond
	}
	buf, err := BufferPolicyOr(req.GetBuffer())
	if err != nil {
		return nil, err
	}
	secret, err := NewSecret()
	if err != nil {
		return nil, err
	}
	now := m.now()
	exp := now.Add(ttl).UnixMilli()
	rec := &concordv1.FedTokenRecord{PeerSystemId: peer, SecretHash: HashSecret(secret), ExpiresAtMs: exp,
		Export: orNone(req.GetExport()), Import: orAll(req.GetImport()), Transitive: req.GetTransitive(),
		Buffer: buf, MaxHops: req.GetMaxHops(), Outbox: req.GetOutbox()}
	if _, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_TOKEN_CREATE,
		&concordv1.FedTokenCreate{Token: rec, CreatedAtMs: now.UnixMilli()}); err != nil {
		return nil, fmt.Errorf("store peering token: %w", err)
	}
	text, err := EncodeToken(&concordv1.FedToken{SystemId: m.cfg.SystemID, Addrs: m.deps.Servers(), CaPem: m.cfg.CAPEM,
		Secret: secret, ExpiresAtMs: exp, PeerSystemId: peer})
	if err != nil {
		return nil, err
	}
	return &concordv1.CreateTokenResponse{Token: text, ExpiresAtMs: exp}, nil
}

// orNone: exporting is explicit, nothing by default. orAll: a system
// imports what its peer chose to export unless told otherwise.
func orNone(p *concordv1.FedPolicy) *concordv1.FedPolicy {
	if p.GetKind() == concordv1.FedPolicyKind_FED_POLICY_KIND_UNSPECIFIED {
		return &concordv1.FedPolicy{Kind: concordv1.FedPolicyKind_FED_POLICY_KIND_NONE}
	}
	return p
}

func orAll(p *concordv1.FedPolicy) *concordv1.FedPolicy {
	if p.GetKind() == concordv1.FedPolicyKind_FED_POLICY_KIND_UNSPECIFIED {
		return &concordv1.FedPolicy{Kind: concordv1.FedPolicyKind_FED_POLICY_KIND_ALL}
	}
	return p
}

// CreateLink redeems a token another system issued for this one: it
// stores the link here, then completes the handshake with the issuer
// (which stores the mirror link and burns the token). When the handshake
// fails the local link is removed again, so a failed attempt leaves no
// half link behind.
func (m *Manager) CreateLink(ctx context.Context, req *concordv1.CreateLinkRequest) (*concordv1.FedLink, error) {
	tok, err := DecodeToken(req.GetToken())
	if err != nil {
		return nil, err
	}
	now := m.now()
	switch {
	case tok.GetSystemId() == m.cfg.SystemID:
		return nil, ErrSelfLink
	case tok.GetPeerSystemId() != m.cfg.SystemID:
		return nil, fmt.Errorf("%w: issued for %q, this system is %q", ErrTokenPeer, tok.GetPeerSystemId(), m.cfg.SystemID)
	case tok.GetExpiresAtMs() <= now.UnixMilli():
		return nil, ErrTokenExpired
	}
	if _, exists := m.deps.State.Link(tok.GetSystemId()); exists {
		return nil, fmt.Errorf("%w: already linked to %s (unlink first)", ErrInvalidCommand, tok.GetSystemId())
	}
	buf, err := BufferPolicyOr(req.GetBuffer())
	if err != nil {
		return nil, err
	}
	link := &concordv1.FedLink{
		PeerSystemId: tok.GetSystemId(), PeerAddrs: tok.GetAddrs(), PeerCaPem: tok.GetCaPem(),
		Export: orNone(req.GetExport()), Import: orAll(req.GetImport()), Transitive: req.GetTransitive(),
		MaxHops: req.GetMaxHops(), Buffer: buf, CreatedAtMs: now.UnixMilli(), Initiator: true, Outbox: req.GetOutbox(),
	}
	if link.MaxHops == 0 {
		link.MaxHops = DefaultMaxHops
	}
	if _, err := m.transportCredentials(link); err != nil {
		return nil, err
	}
	if _, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_PUT, &concordv1.FedLinkPut{Link: link}); err != nil {
		return nil, fmt.Errorf("store link to %s: %w", link.GetPeerSystemId(), err)
	}
	if err := m.handshake(ctx, link, tok.GetSecret()); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer cancel()
		if _, _, rerr := m.deps.Store.Apply(rctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_REMOVE,
			&concordv1.FedLinkRemove{PeerSystemId: link.GetPeerSystemId()}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the half-made link: %w", rerr))
		}
		return nil, err
	}
	m.log.Info("federation link made", "peer", link.GetPeerSystemId())
	return link, nil
}

// handshake calls Peer on the issuer's servers in turn until one answers.
// A refusal (bad token, wrong identity) ends it at once.
func (m *Manager) handshake(ctx context.Context, link *concordv1.FedLink, secret []byte) error {
	req := &concordv1.PeerRequest{Secret: secret, SystemId: m.cfg.SystemID, Addrs: m.deps.Servers(), CaPem: m.cfg.CAPEM}
	var errs []error
	for _, addr := range link.GetPeerAddrs() {
		resp, err := m.callPeer(ctx, link, addr, req)
		if err == nil {
			if resp.GetSystemId() != link.GetPeerSystemId() {
				return fmt.Errorf("%w: %s answered as system %q", ErrInvalidCommand, addr, resp.GetSystemId())
			}
			return nil
		}
		if !retryableStatus(err) {
			return fmt.Errorf("peer %s refused the link: %w", link.GetPeerSystemId(), err)
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("no server of %s answered the handshake: %w", link.GetPeerSystemId(), errors.Join(errs...))
}

func (m *Manager) callPeer(ctx context.Context, link *concordv1.FedLink, addr string, req *concordv1.PeerRequest) (resp *concordv1.PeerResponse, err error) {
	err = m.withPeer(ctx, link, addr, func(ctx context.Context, c concordv1.FederationClient) error {
		resp, err = c.Peer(ctx, req)
		return err
	})
	return resp, err
}

// withPeer runs one call against a peer server, bounded by CallTimeout.
func (m *Manager) withPeer(ctx context.Context, link *concordv1.FedLink, addr string, fn func(context.Context, concordv1.FederationClient) error) error {
	conn, err := m.dial(link, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return fn(cctx, concordv1.NewFederationClient(conn))
}

// notifyUnlink tells link's system, on its servers in turn, that this
// system removed the link. A peer that no longer has it counts as told.
func (m *Manager) notifyUnlink(ctx context.Context, link *concordv1.FedLink) error {
	if _, err := m.transportCredentials(link); err != nil {
		return err
	}
	var errs []error
	for _, addr := range link.GetPeerAddrs() {
		err := m.withPeer(ctx, link, addr, func(ctx context.Context, c concordv1.FederationClient) error {
			_, err := c.PeerUnlink(ctx, &concordv1.PeerUnlinkRequest{SystemId: m.cfg.SystemID})
			return err
		})
		if err == nil || status.Code(err) == codes.NotFound {
			return nil
		}
		if !retryableStatus(err) {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return errors.Join(errs...)
}
