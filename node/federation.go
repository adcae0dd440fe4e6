package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/credentials"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/membership"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/tlsconf"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// fedModule adapts federation.State to raftstore.Module (federation does
// not import raftstore: STYLE.md §1).
type fedModule struct{ st *federation.State }

func (fedModule) Name() string { return federation.ModuleName }

func (m fedModule) Handlers() map[concordv1.CommandType]raftstore.Handler {
	out := map[concordv1.CommandType]raftstore.Handler{}
	for t, newMsg := range m.st.Commands() {
		out[t] = raftstore.Handler{New: newMsg, Apply: m.st.Apply}
	}
	return out
}

func (m fedModule) Snapshot() (raftstore.ModuleSnapshot, error) {
	return fedSnapshot(m.st.Snapshot()), nil
}

func (m fedModule) Restore(next func() ([]byte, error)) (func(), error) { return m.st.Restore(next) }

type fedSnapshot []*concordv1.FedSnapshotRecord

func (s fedSnapshot) Persist(write func([]byte) error) error {
	return federation.PersistSnapshot(s, write)
}

func (fedSnapshot) Release() {}

// fedDirectory is this system's registry as federation exports it.
type fedDirectory struct {
	reg   registry.Reader
	store *raftstore.Store
	// homes maps node ids to their gRPC addresses (the servers' list that
	// peers dial), for FedRemoteAgent.home_addr.
	homes func() map[string]string
}

func (d fedDirectory) Agents() []*concordv1.FedRemoteAgent {
	agents := d.reg.Agents()
	homes := d.homes()
	out := make([]*concordv1.FedRemoteAgent, len(agents))
	for i := range agents {
		out[i] = remoteAgent(&agents[i])
		out[i].HomeAddr = homes[agents[i].HomeNode]
	}
	return out
}

func (d fedDirectory) Agent(id string) (*concordv1.FedRemoteAgent, bool) {
	a, ok := d.reg.Agent(id)
	if !ok {
		return nil, false
	}
	return remoteAgent(&a), true
}

// fedHomes maps this system's server node ids to their gRPC addresses, as
// fedServers lists them (any status: an address does not move when its
// node dies, and a peer falls back to its main stream when it cannot
// reach one).
func (s *Server) fedHomes() map[string]string {
	out := map[string]string{}
	for _, m := range s.members.Members() {
		if m.Role == membership.RoleServer && m.GRPCAddr != "" {
			out[m.ID] = m.GRPCAddr
		}
	}
	if _, ok := out[s.cfg.NodeID]; !ok {
		out[s.cfg.NodeID] = s.grpcAdvertise()
	}
	return out
}

func (d fedDirectory) ScopeMembers(id string) ([]string, bool) {
	sc, ok := d.reg.Scope(id)
	if !ok {
		return nil, false
	}
	return slices.Clone(sc.Members), true
}

func (d fedDirectory) Version() uint64 { return d.store.AppliedIndex() }

// remoteAgent is what a peer sees of a local agent; tags come from
// metadata.tags (an array of strings), what tag export policies match.
func remoteAgent(a *registry.Agent) *concordv1.FedRemoteAgent {
	ra := &concordv1.FedRemoteAgent{Id: a.ID, Name: a.Name, Role: a.Role, State: a.State, Description: a.Description}
	if len(a.Metadata) > 0 {
		var md struct {
			Tags []string `json:"tags"`
		}
		if json.Unmarshal(a.Metadata, &md) == nil {
			ra.Tags = md.Tags
		}
	}
	return ra
}

// fedEvents publishes federation_connected / federation_disconnected to
// this node's subscribers (ephemeral: each node reports its own streams).
type fedEvents struct{ s *Server }

func (e fedEvents) FederationEvent(kind, peer string, data map[string]any) {
	if e.s.hub == nil {
		return
	}
	b, err := json.Marshal(data)
	if err != nil {
		return
	}
	e.s.hub.PublishEphemeral(registry.Event{ID: ulid.Make().String(), Type: kind, Timestamp: time.Now().UnixMilli(), Source: peer, Data: b})
}

// fedServers lists this system's live servers' gRPC addresses, what a
// token and a welcome tell peers to dial.
func (s *Server) fedServers() []string {
	var out []string
	for _, m := range s.members.Members() {
		if m.Status == membership.StatusAlive && m.Role == membership.RoleServer && m.GRPCAddr != "" {
			out = append(out, m.GRPCAddr)
		}
	}
	if len(out) == 0 {
		out = append(out, s.grpcAdvertise())
	}
	slices.Sort(out)
	return out
}

// buildFederation builds the federation manager; its state module is
// already in the Raft store (openStore) and its router hook is set by
// buildMAPService.
func (s *Server) buildFederation() error {
	fc := s.cfg.Federation
	fc.SystemID, fc.NodeID = s.cfg.SystemID, s.cfg.NodeID
	fc.Logger = s.cfg.Logger
	if s.cfg.GRPCDialer != nil && fc.Dialer == nil {
		fc.Dialer = s.cfg.GRPCDialer
	}
	if err := s.fedTrust(&fc); err != nil {
		return err
	}
	m, err := federation.New(fc, federation.Deps{
		State: s.fedState, Store: s.store, IsLeader: s.store.IsLeader,
		Local: fedDirectory{reg: s.registry, store: s.store, homes: s.fedHomes}, Deliver: s.router, Services: s.router, Sessions: s.router,
		Servers: s.fedServers, Events: fedEvents{s}, Barrier: s.readyBarrier, VerifyLeader: s.store.VerifyLeader,
		Nodes: s.fedNodes, NodeConn: s.cluster.PeerConn, MAPDial: s.mapDialer(),
		SessionLive: s.gatewaySessionLive,
		QuoteSessionEpochs: func(ctx context.Context) bool {
			return s.fsmLevel(ctx) >= registry.FSMLevelModuleSessionWrites
		},
	})
	if err != nil {
		return fmt.Errorf("build federation: %w", err)
	}
	s.fed = m
	s.fedHook.set(m)
	m.Register(s.cluster.GRPC())
	if err := s.metrics.reg.Register(fedCollector{m}); err != nil {
		return fmt.Errorf("register federation metrics: %w", err)
	}
	return nil
}

// gatewaySessionLive says whether an SDK gateway's session may still take
// messages: it exists and was not closed by map/disconnect; and its
// attach epoch. A session whose socket dropped stays live until it
// expires (it may resume); a closed one that resumes keeps its binding
// (the unbind quotes the epoch it was closed at).
func (s *Server) gatewaySessionLive(id string) (uint64, bool) {
	at, ok := s.registry.SessionAttachment(id)
	return at.Epoch, ok && !at.Closed
}

// lateFederation is the router's Federation before the manager exists
// (the manager needs the router as its deliverer).
type lateFederation struct {
	systemID string
	m        atomic.Pointer[federation.Manager]
}

func (l *lateFederation) set(m *federation.Manager) { l.m.Store(m) }

func (l *lateFederation) SystemID() string { return l.systemID }

func (l *lateFederation) Send(msg federation.Message, done func(federation.Outcome)) {
	m := l.m.Load()
	if m == nil {
		done(federation.Outcome{Err: &federation.CodeError{Code: federation.CodeUnavailable, Message: "federation starting"}})
		return
	}
	m.Send(msg, done)
}

// Federation exposes the federation manager (status, tests).
func (s *Server) Federation() *federation.Manager { return s.fed }

// remoteAgents lists agents imported from linked systems as registry
// agents with remote ids, for map/agents/list (mapsvc.Config.RemoteAgents).
func (s *Server) remoteAgents(systems []string) []registry.Agent {
	m := s.fedHook.m.Load()
	if m == nil {
		return nil
	}
	var out []registry.Agent
	for sys, agents := range m.RemoteAgents(systems) {
		for _, a := range agents {
			out = append(out, registry.Agent{ID: federation.RemoteID(sys, a.GetId()), Name: a.GetName(),
				Description: a.GetDescription(), Role: a.GetRole(), State: a.GetState()})
		}
	}
	return out
}

// admitFederationPeers lets through the gRPC handshake a client
// certificate that names a server of another system and does not chain to
// this system's CA (own): the holder proved its key, the federation
// methods verify its chain against the CA of the link (or of the token
// being redeemed) on every call, and node/authz grants a certificate of
// another system nothing else. Every other certificate, including one this
// system's CA issued for another system, is verified by next as before.
func admitFederationPeers(next func(tls.ConnectionState) error, systemID string, own *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) > 0 {
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, ownErr := leaf.Verify(x509.VerifyOptions{Roots: own, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			if sys, ok := federation.ServerSystem(leaf); ok && sys != systemID && ownErr != nil {
				return nil
			}
		}
		return next(cs)
	}
}

// caPEM is this system's CA certificate (PEM), from the TLS config.
func (s *Server) caPEM() ([]byte, error) {
	if s.cfg.TLS.CAFile == "" {
		return s.cfg.TLS.CAPEM, nil
	}
	b, err := os.ReadFile(s.cfg.TLS.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	return b, nil
}

// fedTrust fills the federation config's TLS seam from the node's TLS
// material: dial peers with this node's certificate, and pack the system
// CA into tokens.
func (s *Server) fedTrust(fc *federation.Config) error {
	if s.tls == nil {
		return nil
	}
	ca, err := s.caPEM()
	if err != nil {
		return fmt.Errorf("federation tokens: %w", err)
	}
	fc.CAPEM = ca
	own := s.tls.ClientConfig(tlsconf.Expect{}).GetClientCertificate
	fc.Credentials = func(link *concordv1.FedLink) (credentials.TransportCredentials, error) {
		return federation.ClientCredentials(func() (*tls.Certificate, error) { return own(nil) }, link)
	}
	return nil
}

// TLSEnabled reports whether the node runs with TLS material (tests and
// tools choose their credentials by it).
func (s *Server) TLSEnabled() bool { return s.tls != nil }
