package tlstest

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf"
)

var (
	mu    sync.Mutex
	cas   = map[string]*pki.CA{}
	leafs = map[string]pki.Pair{}
)

// CA returns the test CA of systemID, creating it on first use. It panics
// on a key generation failure (a broken test machine).
func CA(systemID string) *pki.CA {
	mu.Lock()
	defer mu.Unlock()
	return caLocked(systemID)
}

func caLocked(systemID string) *pki.CA {
	if ca, ok := cas[systemID]; ok {
		return ca
	}
	ca := ForeignCA(systemID) // the first one made for the id becomes the test CA
	cas[systemID] = ca
	return ca
}

// leaf returns a cached leaf pair issued by issue under key.
func leaf(systemID, key string, issue func(*pki.CA) (pki.Pair, error)) (*pki.CA, pki.Pair) {
	mu.Lock()
	defer mu.Unlock()
	ca := caLocked(systemID)
	if p, ok := leafs[systemID+"/"+key]; ok {
		return ca, p
	}
	p, err := issue(ca)
	if err != nil {
		panic(fmt.Sprintf("tlstest: issue %s: %v", key, err))
	}
	leafs[systemID+"/"+key] = p
	return ca, p
}

// Server returns an in-memory tlsconf.Config for node nodeID of systemID.
func Server(systemID, nodeID string) tlsconf.Config {
	ca, p := leaf(systemID, "server/"+nodeID, func(ca *pki.CA) (pki.Pair, error) {
		return ca.IssueServer(pki.ServerRequest{SystemID: systemID, NodeID: nodeID})
	})
	return tlsconf.Config{CAPEM: ca.CertPEM, CertPEM: p.CertPEM, KeyPEM: p.KeyPEM, SystemID: systemID}
}

// Operator returns an in-memory tlsconf.Config for operator name.
func Operator(systemID, name string) tlsconf.Config {
	ca, p := leaf(systemID, "operator/"+name, func(ca *pki.CA) (pki.Pair, error) {
		return ca.IssueClient(pki.ClientRequest{SystemID: systemID, Name: name})
	})
	return tlsconf.Config{CAPEM: ca.CertPEM, CertPEM: p.CertPEM, KeyPEM: p.KeyPEM, SystemID: systemID}
}

// Files writes c's PEM material into dir as ca.pem, cert.pem and key.pem
// and returns the same Config with file paths instead (for processes and
// CLIs that take files).
func Files(dir string, c tlsconf.Config) (tlsconf.Config, error) {
	out := tlsconf.Config{SystemID: c.SystemID, Logger: c.Logger, CAFile: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(out.CAFile, c.CAPEM, 0o644); err != nil {
		return out, fmt.Errorf("tlstest: write CA: %w", err)
	}
	if len(c.CertPEM) == 0 {
		return out, nil
	}
	out.CertFile, out.KeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(out.CertFile, c.CertPEM, 0o644); err != nil {
		return out, fmt.Errorf("tlstest: write certificate: %w", err)
	}
	if err := os.WriteFile(out.KeyFile, c.KeyPEM, 0o600); err != nil {
		return out, fmt.Errorf("tlstest: write key: %w", err)
	}
	return out, nil
}

// ClientTLS returns a client tls.Config trusting systemID's test CA and
// presenting operator name's certificate (name "" presents none): what a
// MAP client or the CLI uses against a test node.
func ClientTLS(systemID, name string) *tls.Config {
	c := tlsconf.Config{CAPEM: CA(systemID).CertPEM, SystemID: systemID}
	if name != "" {
		c = Operator(systemID, name)
	}
	m, err := tlsconf.New(c)
	if err != nil {
		panic(fmt.Sprintf("tlstest: client tls: %v", err))
	}
	return m.ClientConfig(tlsconf.Expect{})
}

// ForeignCA returns a new CA for systemID that is not the test CA: the
// same system id, another key, as an attacker's own CA would be.
func ForeignCA(systemID string) *pki.CA {
	p, err := pki.CreateCA(systemID, pki.Validity{})
	if err != nil {
		panic(fmt.Sprintf("tlstest: create foreign CA: %v", err))
	}
	ca, err := pki.LoadCA(p)
	if err != nil {
		panic(fmt.Sprintf("tlstest: load foreign CA: %v", err))
	}
	return ca
}
