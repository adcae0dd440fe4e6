package tlsconf

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/concordmap/concord/node/pki"
)

// Config locates the TLS material. Either the files or the PEM fields are
// set (files win); the CA is required, the certificate and key are
// optional only for a client that does not authenticate (the CLI without a
// client certificate).
type Config struct {
	// CAFile is the PEM file of the system CA (one or more certificates):
	// peers' certificates must chain to it.
	CAFile string
	// CertFile and KeyFile are this side's PEM certificate and key.
	CertFile string
	KeyFile  string

	// CAPEM, CertPEM and KeyPEM hold the material in memory instead (tests
	// and embedders); Reload re-reads them unchanged.
	CAPEM   []byte
	CertPEM []byte
	KeyPEM  []byte

	// SystemID, when set, is the system every certificate must name (this
	// side's and peers'). Empty takes it from this side's certificate, or
	// accepts any system the CA signed when there is none.
	SystemID string

	// Own, when set, must accept this side's identity at load and at
	// every reload (a node checks that the certificate names it).
	Own func(pki.Identity) error

	// Logger receives refused handshakes and reloads; nil discards.
	Logger *slog.Logger

	// Now returns the current time, for tests; nil means time.Now.
	Now func() time.Time
}

// Enabled reports whether any TLS material is configured.
func (c Config) Enabled() bool {
	return c.CAFile != "" || len(c.CAPEM) > 0 || c.CertFile != "" || len(c.CertPEM) > 0
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	hasCA := c.CAFile != "" || len(c.CAPEM) > 0
	hasCert := c.CertFile != "" || len(c.CertPEM) > 0
	hasKey := c.KeyFile != "" || len(c.KeyPEM) > 0
	switch {
	case !hasCA:
		return fmt.Errorf("%w: a CA certificate is required (--tls-ca-file / --ca-file)", ErrInvalidConfig)
	case hasCert != hasKey:
		return fmt.Errorf("%w: a certificate needs its key and a key its certificate", ErrInvalidConfig)
	}
	return nil
}

func (c Config) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}
