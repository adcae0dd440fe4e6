package federation

import (
	"context"
	"crypto/x509"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// service implements concordv1.FederationServer.
type service struct {
	concordv1.UnimplementedFederationServer
	m *Manager
}

// Peer redeems a token this system issued: the caller must claim the
// system id the token was issued for (and, with TLS, prove it), and the
// token must be unused and unexpired; the mirror link is stored in the
// same Raft entry that marks the token used.
func (s *service) Peer(ctx context.Context, req *concordv1.PeerRequest) (*concordv1.PeerResponse, error) {
	m := s.m
	switch {
	case !validSystemID(req.GetSystemId()):
		return nil, status.Error(codes.InvalidArgument, "federation: peer request needs a valid system id")
	case req.GetSystemId() == m.cfg.SystemID:
		return nil, status.Error(codes.InvalidArgument, ErrSelfLink.Error())
	case len(req.GetAddrs()) == 0 || len(req.GetAddrs()) > 64:
		return nil, status.Error(codes.InvalidArgument, "federation: peer request needs 1..64 server addresses")
	}
	if err := m.checkIdentity(ctx, req.GetSystemId(), req.GetCaPem()); err != nil {
		return nil, err
	}
	hash := HashSecret(req.GetSecret())
	// The Raft entry checks the token and takes the link's policies from
	// it: this node's replica may not have applied the token yet.
	link := &concordv1.FedLink{
		PeerSystemId: req.GetSystemId(), PeerAddrs: req.GetAddrs(), PeerCaPem: req.GetCaPem(),
		MaxHops: DefaultMaxHops, Buffer: DefaultBufferPolicy(), CreatedAtMs: m.now().UnixMilli(),
	}
	_, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_PUT,
		&concordv1.FedLinkPut{Link: link, RedeemSecretHash: hash, NowMs: m.now().UnixMilli()})
	if err != nil {
		return nil, toStatus(err)
	}
	m.log.Info("federation link accepted", "peer", req.GetSystemId())
	return &concordv1.PeerResponse{SystemId: m.cfg.SystemID, Addrs: m.deps.Servers()}, nil
}

// checkIdentity admits the caller as system claimed: over TLS its
// client certificate chain must verify against caPEM (the link's CA, or
// the CA of the system redeeming a token) and name a server of claimed;
// a plaintext caller only in dev mode (Plaintext).
func (m *Manager) checkIdentity(ctx context.Context, claimed string, caPEM []byte) error {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			certs := info.State.PeerCertificates
			if len(certs) == 0 {
				return status.Error(codes.Unauthenticated, "federation: a linked system's node must present its server certificate")
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caPEM) {
				return status.Errorf(codes.Unauthenticated, "federation: no CA certificate known for system %s", claimed)
			}
			raw := make([][]byte, len(certs))
			for i, c := range certs {
				raw[i] = c.Raw
			}
			if err := verifyPeer(raw, pool, claimed, x509.ExtKeyUsageClientAuth); err != nil {
				return status.Error(codes.Unauthenticated, err.Error())
			}
			return nil
		}
	}
	if !m.cfg.Plaintext {
		return status.Error(codes.Unauthenticated, ErrTLSRequired.Error())
	}
	return nil
}

// CreateToken issues a one-time peering token for the named system.
func (s *service) CreateToken(ctx context.Context, req *concordv1.CreateTokenRequest) (*concordv1.CreateTokenResponse, error) {
	tok, err := s.m.CreateToken(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return tok, nil
}

// CreateLink redeems a token issued by another system.
func (s *service) CreateLink(ctx context.Context, req *concordv1.CreateLinkRequest) (*concordv1.CreateLinkResponse, error) {
	l, err := s.m.CreateLink(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &concordv1.CreateLinkResponse{Link: l}, nil
}

func (s *service) ListLinks(context.Context, *concordv1.ListLinksRequest) (*concordv1.ListLinksResponse, error) {
	return &concordv1.ListLinksResponse{SystemId: s.m.cfg.SystemID, NodeId: s.m.cfg.NodeID, Links: s.m.Status(),
		PendingUnlinks: s.m.deps.State.PendingUnlinks(), Gateways: s.m.Gateways()}, nil
}

// Unlink removes this side of a link, then tells the peer so it removes
// its side too (unlink.go).
func (s *service) Unlink(ctx context.Context, req *concordv1.UnlinkRequest) (*concordv1.UnlinkResponse, error) {
	res, err := s.m.Unlink(ctx, req.GetPeerSystemId(), req.GetForce())
	if err != nil {
		return nil, toStatus(err)
	}
	return res, nil
}

// PeerUnlink removes the mirror of a link its peer removed.
func (s *service) PeerUnlink(ctx context.Context, req *concordv1.PeerUnlinkRequest) (*concordv1.PeerUnlinkResponse, error) {
	m := s.m
	if !validSystemID(req.GetSystemId()) {
		return nil, status.Error(codes.InvalidArgument, "federation: peer unlink needs a valid system id")
	}
	link, ok := m.deps.State.Link(req.GetSystemId())
	if !ok || isMapLink(link) {
		return nil, status.Errorf(codes.NotFound, "federation: no link to %s", req.GetSystemId())
	}
	if err := m.checkIdentity(ctx, req.GetSystemId(), link.GetPeerCaPem()); err != nil {
		return nil, err
	}
	if _, _, err := m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_LINK_REMOVE,
		&concordv1.FedLinkRemove{PeerSystemId: req.GetSystemId()}); err != nil {
		return nil, toStatus(err)
	}
	m.log.Info("federation link removed by its peer", "peer", req.GetSystemId())
	return &concordv1.PeerUnlinkResponse{}, nil
}

// toStatus maps federation and Raft errors to gRPC status codes.
func toStatus(err error) error {
	var c codes.Code
	switch {
	case errors.Is(err, ErrTokenUnknown), errors.Is(err, ErrTokenUsed), errors.Is(err, ErrTokenExpired),
		errors.Is(err, ErrTokenPeer):
		c = codes.PermissionDenied
	case errors.Is(err, ErrBadToken), errors.Is(err, ErrInvalidCommand), errors.Is(err, ErrSelfLink):
		c = codes.InvalidArgument
	case errors.Is(err, ErrNoLink):
		c = codes.NotFound
	case errors.Is(err, ErrStaleHolder):
		c = codes.Aborted
	case errors.Is(err, ErrTLSRequired):
		c = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		c = codes.DeadlineExceeded
	default:
		if st, ok := status.FromError(err); ok {
			c = st.Code()
		} else {
			c = codes.Unavailable
		}
	}
	return status.Error(c, err.Error())
}

// retryableStatus: another server may do better (unavailable, timeout).
func retryableStatus(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return true
	}
	return false
}
