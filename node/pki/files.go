package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// File names of TRUST.md, without directory: CAFiles for ID-ca.pem and
// ID-ca-key.pem, ServerFiles for ID-server-NODE(.pem|-key.pem), ClientFiles
// for ID-client-NAME(.pem|-key.pem).
func CAFiles(systemID string) (cert, key string) { return files(systemID + "-ca") }

// ServerFiles returns the certificate and key file names of a node.
func ServerFiles(systemID, nodeID string) (cert, key string) {
	return files(systemID + "-server-" + nodeID)
}

// ClientFiles returns the certificate and key file names of an operator.
func ClientFiles(systemID, name string) (cert, key string) {
	return files(systemID + "-client-" + name)
}

func files(base string) (string, string) { return base + ".pem", base + "-key.pem" }

// WriteFiles writes p into dir as certFile (0644) and keyFile (0600),
// creating dir (0700: it holds keys) when missing. It refuses with
// ErrExists when either file exists, before writing anything.
func WriteFiles(dir, certFile, keyFile string, p Pair) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: create directory %s: %w", dir, err)
	}
	cp, kp := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	for _, f := range []string{cp, kp} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%w: %s (remove it first to replace it)", ErrExists, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pki: check %s: %w", f, err)
		}
	}
	if err := writeNew(kp, p.KeyPEM, 0o600); err != nil {
		return err
	}
	return writeNew(cp, p.CertPEM, 0o644)
}

// writeNew creates path exclusively, so a concurrent writer cannot be
// overwritten either.
func writeNew(path string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("pki: create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: close %s: %w", path, err)
	}
	return nil
}

// ReadPair reads a certificate and key file.
func ReadPair(certPath, keyPath string) (Pair, error) {
	c, err := os.ReadFile(certPath)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: read certificate: %w", err)
	}
	k, err := os.ReadFile(keyPath)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: read key: %w", err)
	}
	return Pair{CertPEM: c, KeyPEM: k}, nil
}
