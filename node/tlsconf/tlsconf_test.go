package tlsconf_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// chainOf returns a function that parses an issued pair into a one-element
// chain, failing t on error.
func chainOf(t *testing.T) func(pki.Pair, error) []*x509.Certificate {
	return func(p pki.Pair, err error) []*x509.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(p.CertPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return []*x509.Certificate{c}
	}
}

func TestManager_Verify(t *testing.T) {
	chain := chainOf(t)
	m, err := tlsconf.New(tlstest.Server("tsys", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	ca := tlstest.CA("tsys")
	fca := tlstest.ForeignCA("tsys")
	srv := func(r pki.ServerRequest) []*x509.Certificate {
		if r.SystemID == "" {
			r.SystemID = "tsys"
		}
		return chain(ca.IssueServer(r))
	}
	notMember := errors.New("not a member")
	tests := []struct {
		name   string
		chain  []*x509.Certificate
		usage  x509.ExtKeyUsage
		expect tlsconf.Expect
		errHas string
	}{
		{name: "server", chain: srv(pki.ServerRequest{NodeID: "n2"}), usage: x509.ExtKeyUsageClientAuth},
		{name: "server for its node id", chain: srv(pki.ServerRequest{NodeID: "n2"}), usage: x509.ExtKeyUsageServerAuth, expect: tlsconf.Expect{Role: pki.RoleServer, NodeID: "n2"}},
		{name: "none", usage: x509.ExtKeyUsageClientAuth, errHas: "no certificate presented"},
		{name: "expired", chain: srv(pki.ServerRequest{NodeID: "n2", Validity: pki.Validity{NotBefore: time.Now().Add(-72 * time.Hour), Duration: time.Hour}}), usage: x509.ExtKeyUsageClientAuth, errHas: "expired at"},
		{name: "not yet valid", chain: srv(pki.ServerRequest{NodeID: "n2", Validity: pki.Validity{NotBefore: time.Now().Add(time.Hour)}}), usage: x509.ExtKeyUsageClientAuth, errHas: "not valid before"},
		{name: "foreign CA", chain: chain(fca.IssueServer(pki.ServerRequest{SystemID: "tsys", NodeID: "n2"})), usage: x509.ExtKeyUsageClientAuth, errHas: "not signed by this system's CA"},
		{name: "other system", chain: srv(pki.ServerRequest{SystemID: "other", NodeID: "n2"}), usage: x509.ExtKeyUsageClientAuth, errHas: `belongs to system "other"`},
		{name: "operator as server", chain: chain(ca.IssueClient(pki.ClientRequest{SystemID: "tsys", Name: "op"})), usage: x509.ExtKeyUsageServerAuth, errHas: "incompatible key usage"},
		{name: "operator where a server is required", chain: chain(ca.IssueClient(pki.ClientRequest{SystemID: "tsys", Name: "op"})), usage: x509.ExtKeyUsageClientAuth, expect: tlsconf.Expect{Role: pki.RoleServer}, errHas: "a server certificate is required"},
		{name: "other node", chain: srv(pki.ServerRequest{NodeID: "n3"}), usage: x509.ExtKeyUsageServerAuth, expect: tlsconf.Expect{NodeID: "n2"}, errHas: `does not name node "n2"`},
		{name: "refused by Authorize", chain: srv(pki.ServerRequest{NodeID: "n9"}), usage: x509.ExtKeyUsageClientAuth, expect: tlsconf.Expect{Authorize: func(pki.Identity) error { return notMember }}, errHas: "not a member"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Verify(tc.chain, tc.usage, tc.expect)
			switch {
			case tc.errHas == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas) || !errors.Is(err, tlsconf.ErrPeerRefused)):
				t.Fatalf("err = %v, want ErrPeerRefused saying %q", err, tc.errHas)
			}
		})
	}
}

func TestNew_RefusesBadOwnMaterial(t *testing.T) {
	good := tlstest.Server("tsys", "n1")
	other := tlstest.Server("tsys2", "n1")
	tests := []struct {
		name   string
		cfg    tlsconf.Config
		errHas string
	}{
		{"no CA", tlsconf.Config{CertPEM: good.CertPEM, KeyPEM: good.KeyPEM}, "CA certificate is required"},
		{"cert without key", tlsconf.Config{CAPEM: good.CAPEM, CertPEM: good.CertPEM}, "needs its key"},
		{"cert of another CA", tlsconf.Config{CAPEM: good.CAPEM, CertPEM: other.CertPEM, KeyPEM: other.KeyPEM}, "not signed by this system's CA"},
		{"key of another cert", tlsconf.Config{CAPEM: good.CAPEM, CertPEM: good.CertPEM, KeyPEM: other.KeyPEM}, "private key does not match"},
		{"wrong system", tlsconf.Config{CAPEM: good.CAPEM, CertPEM: good.CertPEM, KeyPEM: good.KeyPEM, SystemID: "elsewhere"}, "belongs to system"},
		{"refused by Own", tlsconf.Config{CAPEM: good.CAPEM, CertPEM: good.CertPEM, KeyPEM: good.KeyPEM, Own: func(pki.Identity) error { return errors.New("not me") }}, "not me"},
		{"missing file", tlsconf.Config{CAFile: "/nonexistent/ca.pem"}, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tlsconf.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want %q", err, tc.errHas)
			}
		})
	}
}

// TestManager_ReloadSwapsCAAndCert rotates to a new CA and certificate:
// peers of the old CA are refused afterwards, of the new one accepted; a
// broken file keeps the current material.
func TestManager_ReloadSwapsCAAndCert(t *testing.T) {
	chain := chainOf(t)
	files, err := tlstest.Files(t.TempDir(), tlstest.Server("rsys", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := tlsconf.New(files)
	if err != nil {
		t.Fatal(err)
	}
	oldPeer := chain(tlstest.CA("rsys").IssueServer(pki.ServerRequest{SystemID: "rsys", NodeID: "n2"}))
	newCA := tlstest.ForeignCA("rsys")
	own, err := newCA.IssueServer(pki.ServerRequest{SystemID: "rsys", NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	newPeer := chain(newCA.IssueServer(pki.ServerRequest{SystemID: "rsys", NodeID: "n2"}))

	if err := os.WriteFile(files.CertFile, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Reload(); err == nil {
		t.Fatal("reload of a broken file succeeded")
	}
	if _, err := m.Verify(oldPeer, x509.ExtKeyUsageClientAuth, tlsconf.Expect{}); err != nil {
		t.Fatalf("after a failed reload the old CA no longer works: %v", err)
	}
	for path, data := range map[string][]byte{files.CAFile: newCA.CertPEM, files.CertFile: own.CertPEM, files.KeyFile: own.KeyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Verify(newPeer, x509.ExtKeyUsageClientAuth, tlsconf.Expect{}); err != nil {
		t.Errorf("new CA's peer refused: %v", err)
	}
	if _, err := m.Verify(oldPeer, x509.ExtKeyUsageClientAuth, tlsconf.Expect{}); err == nil {
		t.Error("old CA's peer still accepted")
	}
}

func TestParseClientAuth(t *testing.T) {
	for s, want := range map[string]tlsconf.ClientAuth{"none": tlsconf.ClientAuthNone, "request": tlsconf.ClientAuthRequest, "REQUIRE": tlsconf.ClientAuthRequire} {
		if got, err := tlsconf.ParseClientAuth(s); err != nil || got != want {
			t.Errorf("%s: %v %v", s, got, err)
		}
	}
	if _, err := tlsconf.ParseClientAuth("maybe"); !errors.Is(err, tlsconf.ErrInvalidConfig) {
		t.Errorf("maybe: %v", err)
	}
}
