package node_test

import (
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concordmap/concord/node"
)

// rogueLayer is an attacker's raft.StreamLayer: plaintext TCP, or TLS
// presenting cert without checking the server.
type rogueLayer struct {
	net.Listener
	tls  bool
	cert *tls.Certificate
}

func (l *rogueLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if !l.tls {
		return d.Dial("tcp", string(addr))
	}
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the attacker does not care
	if l.cert != nil {
		cfg.Certificates = []tls.Certificate{*l.cert}
	}
	return tls.DialWithDialer(d, "tcp", string(addr), cfg)
}

// TestSecurity_RogueRaftTransport replays the Raft attack: a
// hand-made AppendEntries at term+1 carrying a forged AGENT_REGISTER, sent
// to the node's Raft port without TLS, without a certificate, with a
// foreign CA's certificate and with a non-member server's certificate.
// Each is refused before raft sees it: the term does not move and the
// agent never appears. A member's certificate (control) reaches raft.
func TestSecurity_RogueRaftTransport(t *testing.T) {
	srv, logs := startSecureNode(t, nil)
	certs := makeRogueCerts(t)
	target := raft.ServerAddress(srv.Store().Addr())
	tests := []struct {
		name    string
		tls     bool
		cert    *tls.Certificate
		refused bool
		logHas  string
	}{
		{name: "plaintext", refused: true},
		{name: "no certificate", tls: true, refused: true},
		{name: "foreign CA", tls: true, cert: certs.foreignCA, refused: true, logHas: "not signed by this system's CA"},
		{name: "expired", tls: true, cert: certs.expired, refused: true, logHas: "expired at"},
		{name: "operator certificate", tls: true, cert: certs.operator, refused: true, logHas: "a server certificate is required"},
		{name: "non-member server", tls: true, cert: certs.nonMember, refused: true, logHas: "neither in the raft configuration nor alive in gossip"},
		{name: "member (control)", tls: true, cert: certs.member},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			trans := raft.NewNetworkTransport(&rogueLayer{Listener: ln, tls: tc.tls, cert: tc.cert}, 1, 2*time.Second, io.Discard)
			defer trans.Close()
			term := raftTerm(t, srv)
			agent := "forged-raft"
			req := &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("rogue"), Addr: []byte(ln.Addr().String())},
				Term:      term + 1, PrevLogEntry: 0, PrevLogTerm: 0,
				Entries:           []*raft.Log{{Index: 1_000_000, Term: term + 1, Type: raft.LogCommand, Data: forgedRegister(t, agent)}},
				LeaderCommitIndex: 1_000_000,
			}
			if !tc.refused {
				req.Term, req.Entries = 0, nil // a stale heartbeat: answered, ignored
			}
			var resp raft.AppendEntriesResponse
			err = trans.AppendEntries("dev-1", target, req, &resp)
			switch {
			case tc.refused && err == nil:
				t.Fatalf("AppendEntries accepted: %+v", resp)
			case !tc.refused && err != nil:
				t.Fatalf("member's AppendEntries: %v, want an answer", err)
			case !tc.refused && resp.Success:
				t.Fatalf("stale AppendEntries succeeded")
			}
			if got := raftTerm(t, srv); got != term {
				t.Fatalf("term moved %d -> %d", term, got)
			}
			if _, ok := srv.Registry().Agent(agent); ok {
				t.Fatal("forged agent applied")
			}
			if tc.logHas != "" && !containsEventually(logs, tc.logHas) {
				t.Errorf("node log does not say %q", tc.logHas)
			}
		})
	}
}

func raftTerm(t *testing.T, srv *node.Server) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(srv.Store().Stats()["term"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// containsEventually waits for s in the log: the server side logs a
// refused handshake on its own goroutine (late on a loaded machine).
func containsEventually(l *logBuffer, s string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if contains(l.String(), s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling a log buffer; no event to wait on
	}
}
