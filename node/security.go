package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/concordmap/concord/federation/connclose"
	"github.com/concordmap/concord/node/authz"
	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// ErrNoTLS is returned by ReloadTLS on a node running without TLS.
var ErrNoTLS = errors.New("node: TLS is not configured")

// grpcMethods classifies every gRPC method the node serves (node/authz
// refuses unlisted ones). Services registered later add theirs here.
var grpcMethods = map[string]authz.Class{
	concordv1.Cluster_Forward_FullMethodName:    authz.Peer,
	concordv1.Cluster_Relay_FullMethodName:      authz.Peer,
	concordv1.Cluster_Members_FullMethodName:    authz.Read,
	concordv1.Cluster_RaftPeers_FullMethodName:  authz.Read,
	concordv1.Cluster_Status_FullMethodName:     authz.Read,
	concordv1.Cluster_RemovePeer_FullMethodName: authz.Admin,
	// Forward's batched form (node/cluster fwdstream.go).
	concordv1.Cluster_ForwardStream_FullMethodName: authz.Peer,

	concordv1.Operator_Health_FullMethodName: authz.Read,
	concordv1.Operator_Drain_FullMethodName:  authz.Admin,
	// A drained node asks the leader, with the operator's credential.
	concordv1.Operator_AdmitDrain_FullMethodName: authz.Admin,
	// Participant credentials (node/acl): operators only, never a peer node.
	concordv1.AclAdmin_CreateToken_FullMethodName: authz.Operator,
	concordv1.AclAdmin_ListTokens_FullMethodName:  authz.Operator,
	concordv1.AclAdmin_RevokeToken_FullMethodName: authz.Operator,
	// Federation: operators manage links; the methods another system's
	// nodes call check the caller themselves (the token's secret, the
	// link's CA and the system the certificate names).
	concordv1.Federation_CreateToken_FullMethodName:   authz.Admin,
	concordv1.Federation_CreateLink_FullMethodName:    authz.Admin,
	concordv1.Federation_Unlink_FullMethodName:        authz.Admin,
	concordv1.Federation_ListLinks_FullMethodName:     authz.Read,
	concordv1.Federation_Peer_FullMethodName:          authz.Open,
	concordv1.Federation_Link_FullMethodName:          authz.Open,
	concordv1.Federation_PeerUnlink_FullMethodName:    authz.Open,
	concordv1.Federation_CreateMapLink_FullMethodName: authz.Admin,
	concordv1.Federation_MapForward_FullMethodName:    authz.Peer,
	concordv1.Federation_OutboxRelay_FullMethodName:   authz.Peer,
	// The keyring (cluster.IsAdminMethod): an operator, or a member server
	// passing an operator's change on to every node.
	concordv1.Admin_KeyringList_FullMethodName:    authz.Admin,
	concordv1.Admin_KeyringInstall_FullMethodName: authz.Admin,
	concordv1.Admin_KeyringUse_FullMethodName:     authz.Admin,
	concordv1.Admin_KeyringRemove_FullMethodName:  authz.Admin,
	// Operator backups; a follower passes them to the leader with its own
	// server certificate, which Admin accepts.
	concordv1.Snapshots_Save_FullMethodName:    authz.Admin,
	concordv1.Snapshots_Restore_FullMethodName: authz.Admin,
}

// lateStore holds the Raft store for membership checks that may run (on
// Raft's transport goroutines) before openStore has returned.
type lateStore struct {
	p atomic.Pointer[raftstore.Store]
}

// buildSecurity loads the TLS material (checking that the certificate
// names this node of this system) and builds the authorizer. It runs
// before any listener or client exists.
func (s *Server) buildSecurity() error {
	if !s.cfg.TLS.Enabled() {
		s.warnInsecure()
	} else {
		tc := s.cfg.TLS
		tc.SystemID = s.cfg.SystemID
		tc.Logger = s.cfg.Logger
		tc.Own = s.checkOwnIdentity
		m, err := tlsconf.New(tc)
		if err != nil {
			return fmt.Errorf("load tls material: %w", err)
		}
		if _, ok := m.Identity(); !ok {
			return errors.New("load tls material: a server certificate and key are required (--tls-cert-file, --tls-key-file)")
		}
		s.tls = m
	}
	a, err := authz.New(authz.Config{
		TLS: s.tls != nil, IsMember: s.isMember, Token: s.cfg.OperatorToken, MetricsToken: s.cfg.MetricsToken, SystemID: s.cfg.SystemID,
		Methods: grpcMethods, Logger: s.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("build authorizer: %w", err)
	}
	s.authz = a
	return nil
}

// insecureWarnInterval is how often a node without TLS repeats its
// warning, so it is not lost at the top of a long log.
const insecureWarnInterval = 15 * time.Minute

func (s *Server) warnInsecure() {
	s.log.Warn("INSECURE: running without TLS: gRPC, Raft and HTTP are plaintext and unauthenticated; " +
		"anyone who reaches these ports can read and write the cluster's state (use only on loopback or for development)")
}

// repeatInsecureWarning logs warnInsecure every insecureWarnInterval until
// ctx ends; a no-op with TLS.
func (s *Server) repeatInsecureWarning(ctx context.Context) error {
	if s.tls != nil {
		return nil
	}
	t := time.NewTicker(insecureWarnInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.warnInsecure()
		}
	}
}

// checkOwnIdentity accepts only a certificate naming this node.
func (s *Server) checkOwnIdentity(id pki.Identity) error {
	if id.Role != pki.RoleServer || id.Name != s.cfg.NodeID {
		return fmt.Errorf("the certificate is %s, this node needs concord://%s/server/%s (concord tls cert create --server --system-id %s --node-id %s)",
			id, s.cfg.SystemID, s.cfg.NodeID, s.cfg.SystemID, s.cfg.NodeID)
	}
	return nil
}

// isMember reports whether node id is a current member of the system: in
// the Raft configuration, or alive in (key-authenticated) gossip, which is
// how a joining server is known before the leader adds it to Raft.
func (s *Server) isMember(id string) bool {
	if id == s.cfg.NodeID {
		return true
	}
	if st := s.raftStore.p.Load(); st != nil && st.HasServer(id) {
		return true
	}
	for _, m := range s.members.Members() {
		if m.ID == id && m.SystemID == s.cfg.SystemID && m.Role == membership.RoleServer && m.Status == membership.StatusAlive {
			return true
		}
	}
	return false
}

// authorizeRaftPeer admits a Raft peer's verified server certificate.
func (s *Server) authorizeRaftPeer(id pki.Identity) error {
	if !s.isMember(id.Name) {
		return fmt.Errorf("node %q is neither in the raft configuration nor alive in gossip", id.Name)
	}
	return nil
}

// securityOptions returns the gRPC server options (credentials and
// authorization) and the peer credentials of the cluster layer.
func (s *Server) securityOptions() ([]grpc.ServerOption, func(string) credentials.TransportCredentials) {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.authz.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.authz.StreamServerInterceptor()),
	}
	if s.tls == nil {
		return opts, nil
	}
	// Request, not require: an operator may authenticate with the token
	// alone; authz refuses node-to-node methods to callers without a
	// member's certificate.
	srv := s.tls.ServerConfig("grpc", tlsconf.ClientAuthRequest, tlsconf.Expect{})
	if ca, err := s.caPEM(); err == nil {
		own := x509.NewCertPool()
		own.AppendCertsFromPEM(ca)
		srv.VerifyConnection = admitFederationPeers(srv.VerifyConnection, s.cfg.SystemID, own)
	} // else the CA was unreadable: peer systems are refused at the handshake

	// Connections close promptly even toward a peer that stopped reading
	// (federation/connclose): grpc.Server.Stop closes them one by one.
	opts = append(opts, grpc.Creds(connclose.NewCredentials(credentials.NewTLS(srv))))
	peer := func(nodeID string) credentials.TransportCredentials {
		return credentials.NewTLS(s.tls.ClientConfig(tlsconf.Expect{Role: pki.RoleServer, NodeID: nodeID}))
	}
	return opts, peer
}

// raftStreamWrapper puts mutual TLS under the Raft transport (nil without
// TLS).
func (s *Server) raftStreamWrapper() func(raft.StreamLayer) raft.StreamLayer {
	if s.tls == nil {
		return nil
	}
	return func(inner raft.StreamLayer) raft.StreamLayer {
		s.raftLayer = s.tls.StreamLayer(inner, s.authorizeRaftPeer)
		return s.raftLayer
	}
}

// voterProbeTimeout bounds the TLS handshake with a server the leader is
// about to add as a voter.
const voterProbeTimeout = 3 * time.Second

// verifiedVoters is the reconciler's view of the Raft store: with TLS a
// server is added as a voter only after a TLS handshake on its Raft
// address proves it holds this system's certificate for its node id.
// Gossip membership is authenticated by the gossip key alone; without
// this a stranger who learned the key would become a voter that can never
// vote, and enough of them would stall the quorum.
type verifiedVoters struct {
	cluster.RaftConfigurator
	s *Server
}

func (v verifiedVoters) AddVoter(ctx context.Context, id, addr string) error {
	if err := v.probe(ctx, id, addr); err != nil {
		return err
	}
	return v.RaftConfigurator.AddVoter(ctx, id, addr)
}

func (v verifiedVoters) AddNonvoter(ctx context.Context, id, addr string) error {
	if err := v.probe(ctx, id, addr); err != nil {
		return err
	}
	return v.RaftConfigurator.AddNonvoter(ctx, id, addr)
}

// probe checks, with TLS, that addr's Raft listener is node id.
func (v verifiedVoters) probe(ctx context.Context, id, addr string) error {
	l := v.s.raftLayer
	if l == nil {
		return nil
	}
	timeout := voterProbeTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if err := l.Probe(raft.ServerAddress(addr), id, timeout); err != nil {
		return fmt.Errorf("not adding %s to raft: its raft address %s did not prove the identity: %w", id, addr, err)
	}
	return nil
}

// wrapHTTPListener serves HTTP over TLS when configured.
func (s *Server) wrapHTTPListener(ln net.Listener) net.Listener {
	if !s.httpTLS() {
		return ln
	}
	cfg := s.tls.ServerConfig("http", s.cfg.HTTPClientAuth, tlsconf.Expect{})
	// WebSocket upgrades need HTTP/1.1.
	cfg.NextProtos = []string{"http/1.1"}
	return tls.NewListener(ln, cfg)
}

func (s *Server) httpTLS() bool { return s.tls != nil && s.cfg.HTTPTLS }

// httpClass says who may use an HTTP endpoint: MAP (which authenticates
// in map/connect), health probes and the console's static files are open;
// /metrics and GET /v1/* as Config.OpenReads says (/metrics also takes the
// metrics token); /debug and every
// write need an operator. CORS preflights carry no credentials by design.
func (s *Server) httpClass(r *http.Request) authz.Class {
	p := r.URL.Path
	switch {
	case p == "/map" || strings.HasPrefix(p, "/map/"), p == "/v1/health", p == "/v1/ready", strings.HasPrefix(p, "/ui/"),
		r.Method == http.MethodOptions:
		return authz.Open
	case strings.HasPrefix(p, "/debug/"):
		return authz.Operator
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return authz.Admin
	case s.cfg.OpenReads && (p == "/metrics" || strings.HasPrefix(p, "/v1/")):
		return authz.Open
	case p == "/metrics":
		return authz.Metrics
	}
	return authz.Read
}

// ReloadJWKS re-reads the bearer-token key set (the JWKS file, or the
// URL re-fetched) so rotated issuer keys apply without a restart; on error
// the keys in use stay. A node without bearer authentication does
// nothing. cmd/concord calls it on SIGHUP.
func (s *Server) ReloadJWKS(ctx context.Context) error {
	if s.auth == nil {
		return nil
	}
	return s.auth.ReloadJWKS(ctx)
}

// ReloadTLS re-reads the CA, certificate and key files and uses them for
// new handshakes on every port; established connections are kept. The old
// material stays in use when the new one is invalid. cmd/concord calls it
// on SIGHUP.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return ErrNoTLS
	}
	return s.tls.Reload()
}
