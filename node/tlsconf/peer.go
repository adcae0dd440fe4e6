package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/concordmap/concord/node/pki"
)

// ClientAuth says whether a server asks for client certificates.
type ClientAuth int

const (
	// ClientAuthNone asks for none.
	ClientAuthNone ClientAuth = iota
	// ClientAuthRequest asks for one and verifies it when given (an
	// operator's credential on the HTTP port); clients without one connect.
	ClientAuthRequest
	// ClientAuthRequire refuses a client without a valid certificate.
	ClientAuthRequire
)

// ParseClientAuth parses none, request or require.
func ParseClientAuth(s string) (ClientAuth, error) {
	switch strings.ToLower(s) {
	case "none":
		return ClientAuthNone, nil
	case "request":
		return ClientAuthRequest, nil
	case "require":
		return ClientAuthRequire, nil
	}
	return 0, fmt.Errorf("%w: client auth %q: want none, request or require", ErrInvalidConfig, s)
}

// Expect is what a peer's certificate must say beyond chaining to the CA
// and belonging to the system.
type Expect struct {
	// Role, when set, is the role the peer must have.
	Role pki.Role
	// NodeID, when set, is the node id a server peer must name (a node
	// dialing a known peer).
	NodeID string
	// Authorize, when set, decides last (e.g. "is a current member").
	Authorize func(pki.Identity) error
}

// Verify checks a peer's chain (leaf first) for usage against the current
// CA and e, returning its identity.
func (m *Manager) Verify(chain []*x509.Certificate, usage x509.ExtKeyUsage, e Expect) (pki.Identity, error) {
	if len(chain) == 0 {
		return pki.Identity{}, fmt.Errorf("%w: no certificate presented", ErrPeerRefused)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	id, err := m.cur.Load().verify(chain[0], inter, usage, m.cfg.now())
	if err != nil {
		return id, err
	}
	switch {
	case e.Role != "" && id.Role != e.Role:
		return id, fmt.Errorf("%w: %s has role %s, a %s certificate is required", ErrPeerRefused, id, id.Role, e.Role)
	case e.NodeID != "" && id.Name != e.NodeID:
		return id, fmt.Errorf("%w: %s does not name node %q", ErrPeerRefused, id, e.NodeID)
	}
	if e.Authorize != nil {
		if err := e.Authorize(id); err != nil {
			return id, fmt.Errorf("%w: %s: %w", ErrPeerRefused, id, err)
		}
	}
	return id, nil
}

// ServerConfig returns the tls.Config of a listening port. With auth other
// than ClientAuthNone a presented certificate is verified for client auth
// against the current CA and e, and a refusal fails the handshake (and is
// logged with the port's name). The config reads the current material at
// every handshake.
func (m *Manager) ServerConfig(port string, auth ClientAuth, e Expect) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := m.cur.Load().cert; c != nil {
				return c, nil
			}
			return nil, fmt.Errorf("%w: no server certificate loaded", ErrInvalidConfig)
		},
	}
	switch auth {
	case ClientAuthNone:
		return cfg
	case ClientAuthRequest:
		cfg.ClientAuth = tls.RequestClientCert
	case ClientAuthRequire:
		cfg.ClientAuth = tls.RequireAnyClientCert
	}
	// crypto/tls would verify against a pool fixed in the config; doing
	// it here lets Reload swap the CA.
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 && auth == ClientAuthRequest {
			return nil
		}
		if _, err := m.Verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, e); err != nil {
			m.log.Warn("tls handshake refused", "port", port, "err", err)
			return err
		}
		return nil
	}
	return cfg
}

// ClientConfig returns the tls.Config for dialing a server whose
// certificate must be a server certificate of the system, chaining to the
// current CA and matching e. Host names are not checked: the identity in
// the certificate is. Our certificate, when loaded, is presented.
func (m *Manager) ClientConfig(e Expect) *tls.Config {
	if e.Role == "" {
		e.Role = pki.RoleServer
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification happens in VerifyConnection, against the CA loaded
		// now and the identity rather than the host name.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := m.cur.Load().cert; c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if _, err := m.Verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, e); err != nil {
				m.log.Warn("tls server refused", "server", cs.ServerName, "err", err)
				return err
			}
			return nil
		},
	}
}

// PeerIdentity returns the identity of a verified peer certificate in cs
// (the handshake verified it; this only reads the URI SAN).
func PeerIdentity(cs tls.ConnectionState) (pki.Identity, bool) {
	if len(cs.PeerCertificates) == 0 {
		return pki.Identity{}, false
	}
	id, err := pki.IdentityOf(cs.PeerCertificates[0])
	return id, err == nil
}
