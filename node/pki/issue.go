package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// Default validities (TRUST.md): a CA lives five years, a leaf one.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
)

// backdate starts a certificate's validity a little in the past, so a peer
// whose clock is slightly behind does not refuse a fresh certificate.
const backdate = 5 * time.Minute

// Pair is a PEM certificate and its PEM (PKCS#8) private key.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Validity bounds a certificate in time. Zero NotBefore means now (minus a
// few minutes of clock skew); zero Duration means the role's default.
// Tests set NotBefore in the past to make expired certificates.
type Validity struct {
	NotBefore time.Time
	Duration  time.Duration
}

func (v Validity) bounds(def time.Duration) (time.Time, time.Time) {
	nb := v.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-backdate)
	}
	d := v.Duration
	if d <= 0 {
		d = def
	}
	return nb, nb.Add(d)
}

// CA is a loaded certificate authority that can issue certificates.
type CA struct {
	Cert     *x509.Certificate
	CertPEM  []byte
	key      crypto.Signer
	SystemID string
}

// CreateCA makes a self-signed ECDSA P-256 CA for systemID.
func CreateCA(systemID string, v Validity) (Pair, error) {
	if err := CheckName("system id", systemID); err != nil {
		return Pair{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: generate CA key: %w", err)
	}
	nb, na := v.bounds(DefaultCAValidity)
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Concord CA " + systemID, Organization: []string{"concord:" + systemID}},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, tmpl, key, key)
}

// LoadCA parses a CA pair written by CreateCA (or any CA certificate and
// its key). The CA's system id is read from its subject organisation
// "concord:ID" when present; Issue* take the system id explicitly anyway.
func LoadCA(p Pair) (*CA, error) {
	tc, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: load CA: %w", err)
	}
	cert, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("pki: load CA: certificate is not a CA")
	}
	signer, ok := tc.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("pki: load CA: key cannot sign")
	}
	ca := &CA{Cert: cert, CertPEM: p.CertPEM, key: signer}
	for _, o := range cert.Subject.Organization {
		if len(o) > len("concord:") && o[:len("concord:")] == "concord:" {
			ca.SystemID = o[len("concord:"):]
		}
	}
	return ca, nil
}

// ServerRequest describes a node's server certificate.
type ServerRequest struct {
	SystemID string
	NodeID   string
	// Addrs are extra IP addresses or DNS names the node is reached at,
	// besides 127.0.0.1 and localhost.
	Addrs    []string
	Validity Validity
}

// IssueServer issues a server certificate (server and client auth, since a
// node dials its peers too) with the SANs of TRUST.md: URI
// concord://ID/server/NODE, DNS NODE.server.ID.concord, server.ID.concord,
// localhost, IP 127.0.0.1 and every address in r.Addrs.
func (ca *CA) IssueServer(r ServerRequest) (Pair, error) {
	if err := CheckName("system id", r.SystemID); err != nil {
		return Pair{}, err
	}
	if err := CheckName("node id", r.NodeID); err != nil {
		return Pair{}, err
	}
	id := Identity{SystemID: r.SystemID, Role: RoleServer, Name: r.NodeID}
	tmpl := leafTemplate(id, r.Validity)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = []string{r.NodeID + ".server." + r.SystemID + ".concord", "server." + r.SystemID + ".concord", "localhost"}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	for _, a := range r.Addrs {
		if ip := net.ParseIP(a); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if a != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, a)
		}
	}
	return ca.issue(tmpl)
}

// ClientRequest describes an operator's client certificate.
type ClientRequest struct {
	SystemID string
	Name     string
	Validity Validity
}

// IssueClient issues an operator certificate (client auth only) with URI
// SAN concord://ID/operator/NAME.
func (ca *CA) IssueClient(r ClientRequest) (Pair, error) {
	if err := CheckName("system id", r.SystemID); err != nil {
		return Pair{}, err
	}
	if err := CheckName("operator name", r.Name); err != nil {
		return Pair{}, err
	}
	tmpl := leafTemplate(Identity{SystemID: r.SystemID, Role: RoleOperator, Name: r.Name}, r.Validity)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

func leafTemplate(id Identity, v Validity) *x509.Certificate {
	nb, na := v.bounds(DefaultLeafValidity)
	return &x509.Certificate{
		Subject:   pkix.Name{CommonName: string(id.Role) + "." + id.Name + "." + id.SystemID},
		NotBefore: nb,
		NotAfter:  na,
		KeyUsage:  x509.KeyUsageDigitalSignature,
		URIs:      []*url.URL{id.URI()},
	}
}

func (ca *CA) issue(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: generate key: %w", err)
	}
	return sign(tmpl, ca.Cert, key, ca.key)
}

// sign creates the certificate tmpl for key's public half, signed by
// parent's key, and PEM-encodes both.
func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (Pair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return Pair{}, fmt.Errorf("pki: serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: create certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: encode key: %w", err)
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}
