package node_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/internal/testlog"
	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

const testToken = "op-token-for-tests"

// testMetricsToken is a scraper's token: /metrics only.
const testMetricsToken = "metrics-token-for-tests"

// logBuffer collects a node's log output for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startSecureNode starts a TLS dev node (system "dev", node "dev-1") with
// the operator token testToken, its logs copied into logs.
func startSecureNode(t *testing.T, mutate func(*node.Config)) (*node.Server, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg := node.DevConfig(t.TempDir())
	secure(&cfg)
	cfg.OperatorToken = []byte(testToken)
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(testlog.Output(t), logs), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatalf("new node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("start node: %v", err)
	}
	return srv, logs
}

// mustCert returns a function turning an issued pair into a
// tls.Certificate, failing t on error.
func mustCert(t *testing.T) func(pki.Pair, error) *tls.Certificate {
	return func(p pki.Pair, err error) *tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
}

// rogueCerts are the certificates an attacker might hold.
type rogueCerts struct {
	foreignCA, otherSystem, expired, nonMember, member, operator *tls.Certificate
}

func makeRogueCerts(t *testing.T) rogueCerts {
	t.Helper()
	ca := tlstest.CA("dev")
	foreign := tlstest.ForeignCA("dev") // same name, another key
	old := pki.Validity{NotBefore: time.Now().Add(-48 * time.Hour), Duration: 24 * time.Hour}
	var r rogueCerts
	must := mustCert(t)
	r.foreignCA = must(foreign.IssueServer(pki.ServerRequest{SystemID: "dev", NodeID: "dev-1"}))
	r.otherSystem = must(ca.IssueServer(pki.ServerRequest{SystemID: "evil", NodeID: "dev-1"}))
	r.expired = must(ca.IssueServer(pki.ServerRequest{SystemID: "dev", NodeID: "dev-1", Validity: old}))
	r.nonMember = must(ca.IssueServer(pki.ServerRequest{SystemID: "dev", NodeID: "intruder"}))
	own := tlstest.Server("dev", "dev-1")
	r.member = must(pki.Pair{CertPEM: own.CertPEM, KeyPEM: own.KeyPEM}, nil)
	op := tlstest.Operator("dev", "alice")
	r.operator = must(pki.Pair{CertPEM: op.CertPEM, KeyPEM: op.KeyPEM}, nil)
	return r
}

// rogueClient dials addr presenting cert (nil: none) without checking the
// server, as an attacker would; plaintext dials without TLS.
func rogueClient(t *testing.T, addr string, cert *tls.Certificate, plaintext bool) concordv1.ClusterClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if !plaintext {
		cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the attacker does not care
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		creds = credentials.NewTLS(cfg)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return concordv1.NewClusterClient(cc)
}

// forgedRegister is the Forward payload of the issue's attack: an
// AGENT_REGISTER for an agent nobody connected.
func forgedRegister(t *testing.T, id string) []byte {
	t.Helper()
	body, err := proto.Marshal(&concordv1.AgentRegisterRequest{Agent: &concordv1.AgentRecord{Id: id, Name: id, HomeNode: "dev-1", State: "registered"}})
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{byte(concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER)}, body...)
}

// TestSecurity_RogueGRPCClients plays the issue's attacks on the gRPC port
// against a TLS node: Forward, Relay, RemovePeer and Status from a
// plaintext client, a client without a certificate, with certificates of a
// foreign CA, of another system, expired, of a non-member server, and as
// an operator or with a token; a member's certificate is the control that
// shows the refusals are not vacuous.
func TestSecurity_RogueGRPCClients(t *testing.T) {
	srv, logs := startSecureNode(t, nil)
	certs := makeRogueCerts(t)
	handshake := codes.Unavailable // the TLS handshake fails: nothing reaches a handler
	type want struct{ forward, relay, remove, status codes.Code }
	refusedAll := func(c codes.Code) want { return want{c, c, c, c} }
	tests := []struct {
		name      string
		cert      *tls.Certificate
		plaintext bool
		token     string
		want      want
		logHas    string
	}{
		{name: "plaintext", plaintext: true, want: refusedAll(handshake)},
		{name: "no certificate", want: refusedAll(codes.Unauthenticated)},
		{name: "foreign CA", cert: certs.foreignCA, want: refusedAll(handshake), logHas: "not signed by this system's CA"},
		{name: "same CA, other system", cert: certs.otherSystem, want: refusedAll(handshake), logHas: "belongs to system"},
		{name: "expired", cert: certs.expired, want: refusedAll(handshake), logHas: "expired at"},
		{name: "non-member server", cert: certs.nonMember, want: refusedAll(codes.PermissionDenied), logHas: "is not a member"},
		{name: "wrong token", token: "guess", want: refusedAll(codes.PermissionDenied), logHas: "token is wrong"},
		{name: "operator certificate", cert: certs.operator, want: want{codes.PermissionDenied, codes.PermissionDenied, codes.OK, codes.OK}},
		{name: "operator token", token: testToken, want: want{codes.PermissionDenied, codes.PermissionDenied, codes.OK, codes.OK}},
		{name: "member (control)", cert: certs.member, want: want{codes.OK, codes.OK, codes.OK, codes.OK}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := rogueClient(t, srv.GRPCAddr(), tc.cert, tc.plaintext)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tc.token != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
			}
			agent := "forged-" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := c.Forward(ctx, &concordv1.ForwardRequest{Command: forgedRegister(t, agent), OriginNodeId: "dev-1"})
			check(t, "Forward", err, tc.want.forward)
			if _, ok := srv.Registry().Agent(agent); ok != (tc.want.forward == codes.OK) {
				t.Errorf("forged agent registered = %v after Forward answered %v", ok, status.Code(err))
			}
			check(t, "Relay", relayForged(ctx, c), tc.want.relay)
			// As the CLI sends it: the admin marker says what this is; the
			// credential decides.
			_, err = c.RemovePeer(cluster.WithAdminMarker(ctx), &concordv1.RemovePeerRequest{Id: "nobody", Force: true})
			check(t, "RemovePeer", err, tc.want.remove)
			_, err = c.Status(ctx, &concordv1.StatusRequest{})
			check(t, "Status", err, tc.want.status)
			if tc.logHas != "" && !containsEventually(logs, tc.logHas) {
				t.Errorf("node log does not say %q:\n%s", tc.logHas, logs.String())
			}
		})
	}
}

// relayForged opens a Relay stream and sends a message "from victim-a"
// with a body that is not JSON, returning the stream's outcome.
func relayForged(ctx context.Context, c concordv1.ClusterClient) error {
	st, err := c.Relay(ctx)
	if err != nil {
		return err
	}
	err = st.Send(&concordv1.RelayBatch{FromNodeId: "dev-1", Envelopes: []*concordv1.RelayEnvelope{{
		Seq: 1, Kind: concordv1.RelayKind_RELAY_KIND_MESSAGE, Message: []byte(`NOT JSON }}}`), RecipientAgentId: "victim-b",
	}}})
	if err == nil || errors.Is(err, io.EOF) { // EOF: the status comes from Recv
		_, err = st.Recv()
	}
	_ = st.CloseSend()
	return err
}

func check(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	got := status.Code(err)
	if want == codes.OK {
		// Authorized: the handler ran; its own answer does not matter here.
		if got == codes.Unauthenticated || got == codes.PermissionDenied || got == codes.Unavailable {
			t.Errorf("%s: %v, want it authorized", what, err)
		}
		return
	}
	if got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

// TestSecurity_HTTPAdmin checks the HTTP port's operator surface: pprof and
// writes need an operator credential (401 without, 403 with one that is not
// enough), an operator certificate or the token opens them; health,
// readiness, the console and MAP stay open, and so do /metrics and GET
// /v1/* unless OpenReads is off (then a member's or operator's credential).
func TestSecurity_HTTPAdmin(t *testing.T) {
	open, _ := startSecureNode(t, func(c *node.Config) { c.EnableDebug = true })
	closed, _ := startSecureNode(t, func(c *node.Config) { c.OpenReads = false; c.MetricsToken = []byte(testMetricsToken) })
	anon, op := httpsClient("dev", ""), httpsClient("dev", "alice")
	member := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: memberTLS()}}
	tests := []struct {
		name   string
		srv    *node.Server
		client *http.Client
		token  string
		path   string
		want   int
	}{
		{"health without credential", closed, anon, "", "/v1/health", http.StatusOK},
		{"ready without credential", closed, anon, "", "/v1/ready", http.StatusOK},
		{"console without credential", closed, anon, "", "/ui/", http.StatusOK},
		{"metrics without credential", open, anon, "", "/metrics", http.StatusOK},
		{"status without credential", open, anon, "", "/v1/status", http.StatusOK},
		{"closed: metrics without credential", closed, anon, "", "/metrics", http.StatusUnauthorized},
		{"closed: metrics with the metrics token", closed, anon, testMetricsToken, "/metrics", http.StatusOK},
		{"closed: metrics with a wrong token", closed, anon, "guess", "/metrics", http.StatusForbidden},
		{"closed: status with the metrics token", closed, anon, testMetricsToken, "/v1/status", http.StatusForbidden},
		{"closed: pprof with the metrics token", closed, anon, testMetricsToken, "/debug/pprof/cmdline", http.StatusForbidden},
		{"closed: write with the metrics token", closed, anon, testMetricsToken, "/v1/anything", http.StatusForbidden},
		{"closed: status without credential", closed, anon, "", "/v1/status", http.StatusUnauthorized},
		{"closed: status with a member server's certificate", closed, member, "", "/v1/status", http.StatusOK},
		{"closed: status with the operator certificate", closed, op, "", "/v1/status", http.StatusOK},
		{"pprof without credential", open, anon, "", "/debug/pprof/cmdline", http.StatusUnauthorized},
		{"pprof with a wrong token", open, anon, "guess", "/debug/pprof/cmdline", http.StatusForbidden},
		{"pprof with a member server's certificate", open, member, "", "/debug/pprof/cmdline", http.StatusForbidden},
		{"pprof with the operator certificate", open, op, "", "/debug/pprof/cmdline", http.StatusOK},
		{"pprof with the token", open, anon, testToken, "/debug/pprof/cmdline", http.StatusOK},
		{"write without credential", open, anon, "", "/v1/anything", http.StatusUnauthorized},
		{"write with the token", open, anon, testToken, "/v1/anything", http.StatusNotFound}, // authorized; no such endpoint
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodGet
			if strings.HasPrefix(tc.name, "write") {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, tc.srv.HTTPURL()+tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s: %d %s, want %d", method, tc.path, resp.StatusCode, body, tc.want)
			}
			if tc.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without a WWW-Authenticate challenge")
			}
		})
	}
	// A plaintext request to the TLS port gets no answer from the API.
	resp, err := http.Get("http://" + open.HTTPAddr() + "/v1/status")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plaintext GET /v1/status: %d, want 400 (TLS required)", resp.StatusCode)
		}
	}
}

// memberTLS presents dev-1's own server certificate.
func memberTLS() *tls.Config {
	own := tlstest.Server("dev", "dev-1")
	c, _ := tls.X509KeyPair(own.CertPEM, own.KeyPEM)
	return &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{c}} //nolint:gosec // test
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestSecurity_HTTPClientAuthRequire: with --http-client-auth require the
// HTTP port refuses a client without a certificate at the handshake (MAP
// included) and serves one with a valid certificate of the system.
func TestSecurity_HTTPClientAuthRequire(t *testing.T) {
	srv, logs := startSecureNode(t, func(c *node.Config) { c.HTTPClientAuth = tlsconf.ClientAuthRequire })
	if _, err := httpsClient("dev", "").Get(srv.HTTPURL() + "/v1/health"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if !containsEventually(logs, "didn't provide a certificate") {
		t.Error("the refused handshake was not logged")
	}
	resp, err := httpsClient("dev", "alice").Get(srv.HTTPURL() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("operator: %d", resp.StatusCode)
	}
}
