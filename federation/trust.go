package federation

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc/credentials"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Trust between systems (federation.md §7). Each system has its own CA;
// a link carries the peer's CA certificate from the token. A node dials a
// peer system with its own server certificate (ServerAuth+ClientAuth) and
// accepts the peer only if its chain verifies against the link's CA and
// its URI SAN is concord://<peer system>/server/<node>. These helpers
// build that from whatever certificate source the node has (its TLS
// configuration plugs in through Config.Credentials; inbound calls are
// checked in checkIdentity).

// ErrPeerIdentity: the peer's certificate does not name the expected
// system's server.
var ErrPeerIdentity = errors.New("federation: peer certificate does not name the linked system")

// ClientCredentials returns transport credentials for dialing the system
// link names: own supplies this node's certificate; the peer must present
// a chain to link's CA naming a server of link's system.
func ClientCredentials(own func() (*tls.Certificate, error), link *concordv1.FedLink) (credentials.TransportCredentials, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(link.GetPeerCaPem()) {
		return nil, fmt.Errorf("%w: link to %s has no usable CA certificate", ErrTLSRequired, link.GetPeerSystemId())
	}
	peerSystem := link.GetPeerSystemId()
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		// The identity is the URI SAN, not a host name: the chain is
		// verified here against the link's CA only (not the system roots).
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyPeerCertificate below
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return own()
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyPeer(raw, pool, peerSystem, x509.ExtKeyUsageServerAuth)
		},
	}
	return credentials.NewTLS(cfg), nil
}

// verifyPeer checks a raw chain against roots and that its leaf names a
// server of system.
func verifyPeer(raw [][]byte, roots *x509.CertPool, system string, usage x509.ExtKeyUsage) error {
	if len(raw) == 0 {
		return fmt.Errorf("%w: no certificate", ErrPeerIdentity)
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPeerIdentity, err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: %w", ErrPeerIdentity, err)
	}
	got, ok := ServerSystem(certs[0])
	if !ok || got != system {
		return fmt.Errorf("%w: want a server of %q, got %q", ErrPeerIdentity, system, got)
	}
	return nil
}

// ServerSystem returns the system a server certificate names through its
// one concord://SYSTEM/server/NODE URI SAN.
func ServerSystem(c *x509.Certificate) (string, bool) {
	var found []*url.URL
	for _, u := range c.URIs {
		if u.Scheme == "concord" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return "", false
	}
	parts := strings.Split(strings.TrimPrefix(found[0].Path, "/"), "/")
	if len(parts) != 2 || parts[0] != "server" || parts[1] == "" || !validSystemID(found[0].Host) {
		return "", false
	}
	return found[0].Host, true
}
