package tlsconf_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// handshakeEnv is a node's MAP/HTTP port config and a MAP client's config
// (the system CA, no client certificate), as `concord bench` and the SDKs
// dial a node.
func handshakeEnv(t testing.TB) (srv, cli *tls.Config) {
	t.Helper()
	m, err := tlsconf.New(tlstest.Server("hsys", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	return m.ServerConfig("http", tlsconf.ClientAuthRequest, tlsconf.Expect{}), tlstest.ClientTLS("hsys", "")
}

// handshake runs one TLS handshake over a pipe and returns the client's
// view. The server then writes one byte, which the client reads, so a
// TLS 1.3 client also takes in the session ticket sent after the
// handshake.
func handshake(t testing.TB, srv, cli *tls.Config) tls.ConnectionState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		s := tls.Server(a, srv)
		if err := s.HandshakeContext(ctx); err != nil {
			errc <- err
			return
		}
		_, err := s.Write([]byte{1})
		errc <- err
	}()
	c := tls.Client(b, cli)
	if err := c.HandshakeContext(ctx); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("client read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}
	return c.ConnectionState()
}

// TestServerConfig_Handshake: a node's port negotiates TLS 1.3 with the
// post-quantum hybrid key exchange, presents an ECDSA P-256 certificate
// (the cheapest signature to make per handshake), and issues session
// tickets, so a reconnecting client with a session cache resumes without
// the certificate exchange (and still runs the hybrid key exchange).
func TestServerConfig_Handshake(t *testing.T) {
	srv, cli := handshakeEnv(t)
	cli = cli.Clone()
	cli.ClientSessionCache = tls.NewLRUClientSessionCache(4)

	first := handshake(t, srv, cli)
	if first.Version != tls.VersionTLS13 {
		t.Fatalf("version %x, want TLS 1.3", first.Version)
	}
	if first.CurveID != tls.X25519MLKEM768 {
		t.Fatalf("key exchange %v, want X25519MLKEM768", first.CurveID)
	}
	if first.DidResume {
		t.Fatal("first handshake resumed")
	}
	key, ok := first.PeerCertificates[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Fatalf("server certificate key %T, want ECDSA P-256", first.PeerCertificates[0].PublicKey)
	}

	again := handshake(t, srv, cli)
	if !again.DidResume {
		t.Fatal("second handshake with the session cache did not resume: no session ticket issued")
	}
	if again.CurveID != tls.X25519MLKEM768 {
		t.Fatalf("resumed key exchange %v, want X25519MLKEM768", again.CurveID)
	}
	if len(again.PeerCertificates) == 0 {
		t.Fatal("resumed session lost the server's certificate (VerifyConnection needs it)")
	}
}

// BenchmarkHandshake is the CPU of one TLS handshake of a MAP connection,
// both sides in this process: the floor under `concord bench sessions`
// (raftstore/DESIGN.md, "10,000 connects through a follower").
func BenchmarkHandshake(b *testing.B) {
	for _, tc := range []struct {
		name   string
		resume bool
	}{{"full", false}, {"resumed", true}} {
		b.Run(tc.name, func(b *testing.B) {
			srv, cli := handshakeEnv(b)
			if tc.resume {
				cli = cli.Clone()
				cli.ClientSessionCache = tls.NewLRUClientSessionCache(4)
				handshake(b, srv, cli)
			}
			b.ReportAllocs()
			for b.Loop() {
				if st := handshake(b, srv, cli); st.DidResume != tc.resume {
					b.Fatalf("DidResume %v, want %v", st.DidResume, tc.resume)
				}
			}
		})
	}
}
