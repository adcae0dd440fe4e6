package pki_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/concordmap/concord/node/pki"
)

func mustCA(t *testing.T, system string) *pki.CA {
	t.Helper()
	p, err := pki.CreateCA(system, pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(p)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parse(t *testing.T, p pki.Pair) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p.CertPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssueServer_SANsAndUsage(t *testing.T) {
	ca := mustCA(t, "prod")
	if ca.SystemID != "prod" {
		t.Fatalf("CA system %q", ca.SystemID)
	}
	p, err := ca.IssueServer(pki.ServerRequest{SystemID: "prod", NodeID: "n1", Addrs: []string{"10.0.0.5", "n1.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, p)
	id, err := pki.IdentityOf(c)
	if err != nil || id != (pki.Identity{SystemID: "prod", Role: pki.RoleServer, Name: "n1"}) {
		t.Fatalf("identity %+v %v", id, err)
	}
	for _, dns := range []string{"n1.server.prod.concord", "server.prod.concord", "localhost", "n1.example.com"} {
		if !slices.Contains(c.DNSNames, dns) {
			t.Errorf("DNS SANs %v lack %s", c.DNSNames, dns)
		}
	}
	var ips []string
	for _, ip := range c.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Contains(ips, "127.0.0.1") || !slices.Contains(ips, "10.0.0.5") {
		t.Errorf("IP SANs %v", ips)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ext key usage %v", c.ExtKeyUsage)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"}); err != nil {
		t.Errorf("verify against the CA: %v", err)
	}
	if d := c.NotAfter.Sub(c.NotBefore); d < pki.DefaultLeafValidity {
		t.Errorf("validity %v", d)
	}
}

func TestIssueClient_OperatorOnly(t *testing.T) {
	ca := mustCA(t, "prod")
	p, err := ca.IssueClient(pki.ClientRequest{SystemID: "prod", Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, p)
	if id, _ := pki.IdentityOf(c); id.Role != pki.RoleOperator || id.Name != "alice" {
		t.Fatalf("identity %+v", id)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(c.DNSNames) != 0 {
		t.Errorf("usage %v DNS %v", c.ExtKeyUsage, c.DNSNames)
	}
}

func TestParseIdentity(t *testing.T) {
	tests := []struct {
		uri string
		ok  bool
	}{
		{"concord://sys/server/n1", true},
		{"concord://sys/operator/alice", true},
		{"concord://sys/admin/alice", false},
		{"concord://sys/server", false},
		{"concord://sys/server/", false},
		{"concord://sys/server/a/b", false},
		{"concord:///server/n1", false},
		{"spiffe://sys/server/n1", false},
	}
	for _, tc := range tests {
		u, err := url.Parse(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		_, err = pki.ParseIdentity(u)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.uri, err, tc.ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{"n1": true, "node_2-b": true, "": false, "-x": false, "a.b": false, "a/b": false, "ü": false} {
		if err := pki.CheckName("node id", name); (err == nil) != ok || (err != nil && !errors.Is(err, pki.ErrBadName)) {
			t.Errorf("%q: %v, want ok=%v", name, err, ok)
		}
	}
	if _, err := pki.CreateCA("bad id", pki.Validity{}); !errors.Is(err, pki.ErrBadName) {
		t.Errorf("CreateCA with a bad id: %v", err)
	}
}

func TestWriteFiles_ModesAndNoOverwrite(t *testing.T) {
	dir := t.TempDir()
	p, err := pki.CreateCA("sys", pki.Validity{})
	if err != nil {
		t.Fatal(err)
	}
	cert, key := pki.CAFiles("sys")
	if cert != "sys-ca.pem" || key != "sys-ca-key.pem" {
		t.Fatalf("names %s %s", cert, key)
	}
	if err := pki.WriteFiles(dir, cert, key, p); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, key)); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode())
	}
	if err := pki.WriteFiles(dir, cert, key, p); !errors.Is(err, pki.ErrExists) {
		t.Errorf("second write: %v, want ErrExists", err)
	}
	back, err := pki.ReadPair(filepath.Join(dir, cert), filepath.Join(dir, key))
	if err != nil || string(back.CertPEM) != string(p.CertPEM) {
		t.Fatalf("read back: %v", err)
	}
	// A missing directory is created, readable only by its owner.
	sub := filepath.Join(dir, "new", "tls")
	if err := pki.WriteFiles(sub, cert, key, p); err != nil {
		t.Fatalf("write into a missing directory: %v", err)
	}
	if fi, err := os.Stat(sub); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory: %v, %v", fi, err)
	}
	if c, k := pki.ServerFiles("sys", "n1"); c != "sys-server-n1.pem" || k != "sys-server-n1-key.pem" {
		t.Errorf("server names %s %s", c, k)
	}
	if c, k := pki.ClientFiles("sys", "bob"); c != "sys-client-bob.pem" || k != "sys-client-bob-key.pem" {
		t.Errorf("client names %s %s", c, k)
	}
}
