package authz

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/pki"
)

// Class is what a caller must be to call a method or endpoint.
type Class int

const (
	// Deny refuses everyone (the class of anything not listed).
	Deny Class = iota
	// Open lets anyone call (health probes).
	Open
	// Peer needs a member server of the system.
	Peer
	// Read needs a member server or an operator.
	Read
	// Admin needs an operator (certificate or token) or a member server.
	Admin
	// Operator needs an operator certificate or the token; servers are
	// refused (operator-only HTTP endpoints such as /debug/pprof).
	Operator
	// Metrics is Read that also takes the metrics token: a scraper
	// (Prometheus) gets /metrics without an operator's or a server's
	// powers.
	Metrics
)

func (c Class) String() string {
	return [...]string{"deny", "open", "peer", "read", "admin", "operator", "metrics"}[c]
}

// Config configures an Authorizer.
type Config struct {
	// TLS says identities come from verified client certificates. false
	// (--insecure) trusts every caller except for Admin and Operator,
	// which then need the token when Token is set.
	TLS bool
	// IsMember reports whether node id is a current member of the system
	// (in the Raft configuration or alive in gossip). Required with TLS.
	IsMember func(nodeID string) bool
	// SystemID, when set, is this system: a certificate naming another
	// system grants nothing (federation peers reach only Open methods).
	SystemID string
	// Token is the operator token; empty accepts no token.
	Token []byte
	// MetricsToken is accepted for the Metrics class only; empty accepts
	// none.
	MetricsToken []byte
	// Methods maps full gRPC method names ("/pkg.Service/Method") to their
	// class; unlisted methods are refused.
	Methods map[string]Class
	// Logger receives refusals at Warn; nil discards.
	Logger *slog.Logger
}

// Authorizer applies a Config. Safe for concurrent use.
type Authorizer struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg and returns an Authorizer.
func New(cfg Config) (*Authorizer, error) {
	if cfg.TLS && cfg.IsMember == nil {
		return nil, errors.New("authz: IsMember is required with TLS")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authorizer{cfg: cfg, log: log.With("component", "authz")}, nil
}

// Caller is who presented what: an identity from a verified certificate
// and/or a bearer token.
type Caller struct {
	ID     pki.Identity
	HasID  bool
	Token  string
	HasTok bool
}

// errUnauthenticated means the caller presented no credential the class
// accepts; errForbidden a credential that is not enough.
var (
	errUnauthenticated = errors.New("authz: credential required")
	errForbidden       = errors.New("authz: not allowed")
)

// Check returns nil when c may call something of class cl, else an error
// wrapping errUnauthenticated or errForbidden that says what is missing.
func (a *Authorizer) Check(cl Class, c Caller) error {
	tokenOK := c.HasTok && len(a.cfg.Token) > 0 && subtle.ConstantTimeCompare([]byte(c.Token), a.cfg.Token) == 1
	metricsOK := cl == Metrics && c.HasTok && len(a.cfg.MetricsToken) > 0 &&
		subtle.ConstantTimeCompare([]byte(c.Token), a.cfg.MetricsToken) == 1
	if metricsOK {
		return nil
	}
	if c.HasTok && !tokenOK {
		return fmt.Errorf("%w: the operator token is wrong", errForbidden)
	}
	if !a.cfg.TLS {
		switch {
		case cl == Deny:
			return fmt.Errorf("%w: no such method", errForbidden)
		case (cl == Admin || cl == Operator) && len(a.cfg.Token) > 0 && !tokenOK:
			return fmt.Errorf("%w: an operator token is required", errUnauthenticated)
		}
		return nil
	}
	// A certificate of another system (a federation peer, admitted to the
	// handshake so its federation calls can verify it) is never a member
	// or an operator here.
	ours := c.HasID && (a.cfg.SystemID == "" || c.ID.SystemID == a.cfg.SystemID)
	member := ours && c.ID.Role == pki.RoleServer && a.cfg.IsMember(c.ID.Name)
	operator := tokenOK || (ours && c.ID.Role == pki.RoleOperator)
	switch cl {
	case Open:
		return nil
	case Peer:
		if member {
			return nil
		}
	case Read, Admin, Metrics:
		if member || operator {
			return nil
		}
	case Operator:
		if operator {
			return nil
		}
	default:
		return fmt.Errorf("%w: no such method", errForbidden)
	}
	switch {
	case !c.HasID && !c.HasTok:
		return fmt.Errorf("%w: %s access needs %s", errUnauthenticated, cl, need(cl))
	case c.HasID && c.ID.Role == pki.RoleServer && !a.cfg.IsMember(c.ID.Name):
		return fmt.Errorf("%w: %s is not a member of the system", errForbidden, c.ID)
	default:
		return fmt.Errorf("%w: %s access needs %s", errForbidden, cl, need(cl))
	}
}

func need(cl Class) string {
	switch cl {
	case Peer:
		return "a member server's certificate"
	case Operator:
		return "an operator certificate or the operator token"
	case Metrics:
		return "the metrics token, a member server's certificate, an operator certificate or the operator token"
	default:
		return "a member server's certificate, an operator certificate or the operator token"
	}
}

// UnaryServerInterceptor authorizes unary calls by Methods. A caller's
// authorization metadata is passed on to calls the handler makes with its
// context (RemovePeer's hop to the leader).
func (a *Authorizer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.checkGRPC(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v[0])
			}
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor authorizes streams by Methods, once when the
// stream opens.
func (a *Authorizer) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.checkGRPC(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func (a *Authorizer) checkGRPC(ctx context.Context, method string) error {
	c := Caller{}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			// The handshake verified the chain (tlsconf); read the identity.
			if id, err := pki.IdentityOf(ti.State.PeerCertificates[0]); err == nil {
				c.ID, c.HasID = id, true
			}
		}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			c.Token, c.HasTok = bearer(v[0])
		}
	}
	err := a.Check(a.cfg.Methods[method], c)
	if err == nil {
		return nil
	}
	a.log.Warn("grpc call refused", "method", method, "caller", describe(c), "err", err)
	if errors.Is(err, errUnauthenticated) {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

// bearer returns the token of an "Bearer <token>" header value.
func bearer(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return "", v != ""
	}
	return strings.TrimSpace(tok), true
}

func describe(c Caller) string {
	switch {
	case c.HasID:
		return c.ID.String()
	case c.HasTok:
		return "token"
	}
	return "anonymous"
}
