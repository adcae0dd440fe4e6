package federation

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, system string) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: system + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca testCA) server(t *testing.T, system, node string) *tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		URIs:        []*url.URL{{Scheme: "concord", Host: system, Path: "/server/" + node}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// handshake runs the client credentials for link against a TLS server
// presenting cert and returns the client's verdict.
func handshake(t *testing.T, link *concordv1.FedLink, own, cert *tls.Certificate) error {
	t.Helper()
	creds, err := ClientCredentials(func() (*tls.Certificate, error) { return own, nil }, link)
	if err != nil {
		return err
	}
	// Loopback TCP, not net.Pipe: a refused handshake writes an alert
	// while the server may still be writing its flight.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	srv := tls.Server(c2, &tls.Config{Certificates: []tls.Certificate{*cert}, ClientAuth: tls.RequireAnyClientCert,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Handshake() }()
	defer func() { c2.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = creds.ClientHandshake(ctx, "server.dc2.concord", c1)
	return err
}

func TestClientCredentials_VerifiesPeerSystem(t *testing.T) {
	ca1, ca2, ca3 := newCA(t, "dc1"), newCA(t, "dc2"), newCA(t, "dc3")
	own := ca1.server(t, "dc1", "n1")
	link := &concordv1.FedLink{PeerSystemId: "dc2", PeerCaPem: ca2.pem}
	if err := handshake(t, link, own, ca2.server(t, "dc2", "n3")); err != nil {
		t.Fatalf("the linked system's server was refused: %v", err)
	}
	for name, cert := range map[string]*tls.Certificate{
		"a certificate for another system from the same CA": ca2.server(t, "dc3", "n1"),
		"the right name from another CA":                    ca3.server(t, "dc2", "n1"),
	} {
		if err := handshake(t, link, own, cert); !errors.Is(err, ErrPeerIdentity) {
			t.Fatalf("%s: got %v, want ErrPeerIdentity", name, err)
		}
	}
	if _, err := ClientCredentials(nil, &concordv1.FedLink{PeerSystemId: "dc2"}); !errors.Is(err, ErrTLSRequired) {
		t.Fatalf("link without a CA: %v", err)
	}
}
