package acl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// JWKS defaults (JWTConfig zero values take them).
const (
	DefaultJWKSRefresh    = 5 * time.Minute
	DefaultJWKSFilePoll   = 10 * time.Second
	DefaultJWKSMinRefetch = 30 * time.Second
	DefaultJWKSTimeout    = 10 * time.Second
	DefaultJWKSMaxBytes   = 1 << 20
)

// keySource holds the current JWKS and replaces it without a restart:
// the file is re-read when its size or modification time changes (polled)
// and on Reload (SIGHUP); the URL is re-fetched every Refresh, on Reload,
// and when a token names a kid the set lacks (at most once per
// MinRefetch, so forged kids cannot make the node hammer the issuer).
// A failed reload keeps the keys in use. Safe for concurrent use.
type keySource struct {
	cfg    JWTConfig
	log    *slog.Logger
	client *http.Client
	keys   atomic.Pointer[jose.JSONWebKeySet]

	// logURL is the JWKS URL as logs and errors show it: without
	// credentials or query, which may carry a secret (redactURL).
	logURL string

	mu        sync.Mutex // serialises loads; guards the fields below
	fileStamp string     // size and mtime of the file last loaded
	lastFetch time.Time  // last URL fetch attempt
}

func newKeySource(cfg JWTConfig, log *slog.Logger) (*keySource, error) {
	switch {
	case (cfg.JWKSFile == "") == (cfg.JWKSURL == ""):
		return nil, errors.New("acl: exactly one of the JWKS file and the JWKS URL is required")
	case cfg.JWKSCAFile != "" && cfg.JWKSURL == "":
		return nil, errors.New("acl: a JWKS CA file needs a JWKS URL")
	}
	ks := &keySource{cfg: cfg, log: log}
	ks.keys.Store(&jose.JSONWebKeySet{})
	if cfg.JWKSURL != "" {
		u, err := url.Parse(cfg.JWKSURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			// The value is not echoed: it may hold a credential.
			return nil, errors.New("acl: the JWKS URL must be https://host/...")
		}
		ks.logURL = redactURL(u)
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.JWKSCAFile != "" {
			pem, err := os.ReadFile(cfg.JWKSCAFile)
			if err != nil {
				return nil, fmt.Errorf("acl: read JWKS CA file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("acl: JWKS CA file %s holds no PEM certificate", cfg.JWKSCAFile)
			}
		}
		ks.client = &http.Client{
			Timeout:   cfg.JWKSTimeout,
			Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment, MaxIdleConns: 1, IdleConnTimeout: time.Minute},
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if req.URL.Scheme != "https" || len(via) >= 3 {
					return errors.New("JWKS redirect refused (not https, or too many)")
				}
				return nil
			},
		}
		// An unreachable issuer does not stop the node: bearer tokens fail
		// until a fetch succeeds (Run retries).
		ctx, cancel := context.WithTimeout(context.Background(), cfg.JWKSTimeout)
		defer cancel()
		if err := ks.fetch(ctx); err != nil {
			log.Warn("JWKS fetch failed; bearer tokens are refused until it succeeds", "url", ks.logURL, "err", err)
		}
		return ks, nil
	}
	if _, err := ks.loadFile(true); err != nil {
		return nil, err
	}
	return ks, nil
}

// Keys returns the current key set (never nil).
func (ks *keySource) Keys() *jose.JSONWebKeySet { return ks.keys.Load() }

// has reports whether the current set holds kid.
func (ks *keySource) has(kid string) bool { return len(ks.Keys().Key(kid)) > 0 }

// loadFile re-reads the file when forced or when it changed. It reports
// whether the keys were replaced.
func (ks *keySource) loadFile(force bool) (bool, error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	fi, err := os.Stat(ks.cfg.JWKSFile)
	if err != nil {
		return false, fmt.Errorf("acl: read JWKS: %w", err)
	}
	stamp := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	if !force && stamp == ks.fileStamp {
		return false, nil
	}
	if fi.Size() > ks.cfg.JWKSMaxBytes {
		return false, fmt.Errorf("acl: JWKS %s is %d bytes, more than %d", ks.cfg.JWKSFile, fi.Size(), ks.cfg.JWKSMaxBytes)
	}
	b, err := os.ReadFile(ks.cfg.JWKSFile)
	if err != nil {
		return false, fmt.Errorf("acl: read JWKS: %w", err)
	}
	set, err := parseJWKS(b)
	if err != nil {
		return false, fmt.Errorf("acl: JWKS %s: %w", ks.cfg.JWKSFile, err)
	}
	ks.fileStamp = stamp
	ks.keys.Store(&set)
	return true, nil
}

// fetch GETs the URL and replaces the keys on success.
func (ks *keySource) fetch(ctx context.Context) error {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.fetchLocked(ctx)
}

func (ks *keySource) fetchLocked(ctx context.Context) error {
	ks.lastFetch = time.Now()
	ctx, cancel := context.WithTimeout(ctx, ks.cfg.JWKSTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ks.cfg.JWKSURL, nil)
	if err != nil {
		return fmt.Errorf("build JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := ks.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = ks.logURL // net/http names the URL it tried, query and all
		}
		return fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch JWKS: HTTP %d", resp.StatusCode)
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, ks.cfg.JWKSMaxBytes+1))
	if err != nil {
		return fmt.Errorf("read JWKS: %w", err)
	}
	if n > ks.cfg.JWKSMaxBytes {
		return fmt.Errorf("JWKS larger than %d bytes", ks.cfg.JWKSMaxBytes)
	}
	set, err := parseJWKS(buf.Bytes())
	if err != nil {
		return fmt.Errorf("JWKS from %s: %w", ks.logURL, err)
	}
	ks.keys.Store(&set)
	return nil
}

// refetchForKid fetches the URL again because a token names an unknown
// kid, unless a fetch happened less than MinRefetch ago (or there is no
// URL). Concurrent callers wait for one fetch.
func (ks *keySource) refetchForKid(ctx context.Context, kid string) {
	if ks.cfg.JWKSURL == "" {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.has(kid) || time.Since(ks.lastFetch) < ks.cfg.JWKSMinRefetch {
		return
	}
	if err := ks.fetchLocked(ctx); err != nil {
		ks.log.Warn("JWKS re-fetch for an unknown kid failed", "url", ks.logURL, "err", err)
		return
	}
	ks.log.Info("JWKS re-fetched for an unknown kid", "url", ks.logURL, "keys", len(ks.Keys().Keys))
}

// Reload re-reads the file or re-fetches the URL now (SIGHUP). On error
// the keys in use stay.
func (ks *keySource) Reload(ctx context.Context) error {
	if ks.cfg.JWKSURL != "" {
		return ks.fetch(ctx)
	}
	_, err := ks.loadFile(true)
	return err
}

// Run polls the file for changes (every FilePoll) or re-fetches the URL
// (every Refresh) until ctx ends.
func (ks *keySource) Run(ctx context.Context) error {
	every := ks.cfg.JWKSFilePoll
	if ks.cfg.JWKSURL != "" {
		every = ks.cfg.JWKSRefresh
	}
	t := time.NewTicker(every)
	defer t.Stop()
	if ks.client != nil {
		defer ks.client.CloseIdleConnections() // no keep-alive outlives the node
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if ks.cfg.JWKSURL != "" {
			if err := ks.fetch(ctx); err != nil {
				ks.log.Warn("JWKS refresh failed; keeping the keys in use", "url", ks.logURL, "err", err)
			}
			continue
		}
		switch changed, err := ks.loadFile(false); {
		case err != nil:
			ks.log.Warn("JWKS file reload failed; keeping the keys in use", "file", ks.cfg.JWKSFile, "err", err)
		case changed:
			ks.log.Info("JWKS file reloaded", "file", ks.cfg.JWKSFile, "keys", len(ks.Keys().Keys))
		}
	}
}

// redactURL returns u without what may be a secret: the user info, the
// query (some issuers take an API key there) and the fragment.
func redactURL(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.User != nil {
		r.User = url.User("redacted")
	}
	if u.RawQuery != "" {
		r.RawQuery = "redacted"
	}
	return r.String()
}
