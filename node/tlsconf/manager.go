package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/concordmap/concord/node/pki"
)

// renewWarning is how close to expiry a loaded certificate is logged as
// needing rotation.
const renewWarning = 30 * 24 * time.Hour

// Manager holds the current TLS material and hands out tls.Configs that
// read it at each handshake. All methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger
	cur atomic.Pointer[bundle]
}

// bundle is one loaded generation of material; never modified once
// published.
type bundle struct {
	roots *x509.CertPool
	cert  *tls.Certificate // nil: no certificate of our own
	leaf  *x509.Certificate
	id    pki.Identity // valid when cert != nil
	// system is the system peers must belong to ("" accepts any).
	system string
}

// New loads the material of cfg. It fails when the CA or the certificate
// cannot be read, when the certificate does not chain to the CA, is not
// valid now, or names another system than cfg.SystemID.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, log: log.With("component", "tls")}
	b, err := m.load()
	if err != nil {
		return nil, err
	}
	m.cur.Store(b)
	return m, nil
}

// Reload re-reads the files and, when the new material is valid, swaps it
// in: new handshakes use it, established connections are not touched. On
// error the old material stays in use. cmd/concord calls it on SIGHUP.
func (m *Manager) Reload() error {
	b, err := m.load()
	if err != nil {
		return fmt.Errorf("tls reload (the previous material stays in use): %w", err)
	}
	m.cur.Store(b)
	var attrs []any
	if b.leaf != nil {
		attrs = append(attrs, "identity", b.id.String(), "not_after", b.leaf.NotAfter)
	}
	m.log.Info("tls material reloaded", attrs...)
	return nil
}

// Identity returns this side's identity; ok is false without a certificate.
func (m *Manager) Identity() (id pki.Identity, ok bool) {
	b := m.cur.Load()
	return b.id, b.cert != nil
}

// SystemID is the system peers must belong to ("" when any).
func (m *Manager) SystemID() string { return m.cur.Load().system }

func (m *Manager) load() (*bundle, error) {
	caPEM, err := m.read(m.cfg.CAFile, m.cfg.CAPEM, "CA")
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tlsconf: CA %s: no PEM certificate found", m.cfg.CAFile)
	}
	b := &bundle{roots: roots, system: m.cfg.SystemID}
	if m.cfg.CertFile == "" && len(m.cfg.CertPEM) == 0 {
		return b, nil
	}
	certPEM, err := m.read(m.cfg.CertFile, m.cfg.CertPEM, "certificate")
	if err != nil {
		return nil, err
	}
	keyPEM, err := m.read(m.cfg.KeyFile, m.cfg.KeyPEM, "key")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: certificate and key %s: %w", m.cfg.CertFile, err)
	}
	b.cert, b.leaf = &cert, cert.Leaf
	if b.id, err = b.verify(cert.Leaf, intermediates(cert.Certificate[1:]), x509.ExtKeyUsageAny, m.cfg.now()); err != nil {
		return nil, fmt.Errorf("tlsconf: own certificate %s: %w", m.cfg.CertFile, err)
	}
	if m.cfg.Own != nil {
		if err := m.cfg.Own(b.id); err != nil {
			return nil, fmt.Errorf("tlsconf: own certificate %s: %w", m.cfg.CertFile, err)
		}
	}
	if b.system == "" {
		b.system = b.id.SystemID
	}
	if left := cert.Leaf.NotAfter.Sub(m.cfg.now()); left < renewWarning {
		m.log.Warn("certificate expires soon: issue a new one and reload (SIGHUP)",
			"identity", b.id.String(), "not_after", cert.Leaf.NotAfter)
	}
	return b, nil
}

func (m *Manager) read(path string, inline []byte, what string) ([]byte, error) {
	if path == "" {
		if len(inline) == 0 {
			return nil, fmt.Errorf("%w: no %s", ErrInvalidConfig, what)
		}
		return inline, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: read %s: %w", what, err)
	}
	return data, nil
}

func intermediates(ders [][]byte) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, d := range ders {
		if c, err := x509.ParseCertificate(d); err == nil {
			pool.AddCert(c)
		}
	}
	return pool
}

// verify checks leaf against b's CA at now for usage and returns its
// identity, which must belong to b.system when that is set. The error
// says why in words an operator can act on.
func (b *bundle) verify(leaf *x509.Certificate, inter *x509.CertPool, usage x509.ExtKeyUsage, now time.Time) (pki.Identity, error) {
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: b.roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage},
	})
	var inv x509.CertificateInvalidError
	var unknown x509.UnknownAuthorityError
	switch {
	case err == nil:
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		if now.Before(leaf.NotBefore) {
			return pki.Identity{}, fmt.Errorf("%w: certificate %q is not valid before %s (clock skew?)", ErrPeerRefused, leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		return pki.Identity{}, fmt.Errorf("%w: certificate %q expired at %s", ErrPeerRefused, leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	case errors.As(err, &unknown):
		return pki.Identity{}, fmt.Errorf("%w: certificate %q is not signed by this system's CA (issuer %q)", ErrPeerRefused, leaf.Subject.CommonName, leaf.Issuer.CommonName)
	default:
		return pki.Identity{}, fmt.Errorf("%w: certificate %q: %w", ErrPeerRefused, leaf.Subject.CommonName, err)
	}
	id, err := pki.IdentityOf(leaf)
	if err != nil {
		return pki.Identity{}, fmt.Errorf("%w: certificate %q: %w", ErrPeerRefused, leaf.Subject.CommonName, err)
	}
	if b.system != "" && id.SystemID != b.system {
		return pki.Identity{}, fmt.Errorf("%w: %s belongs to system %q, this is system %q", ErrPeerRefused, id, id.SystemID, b.system)
	}
	return id, nil
}
