package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/tlsconf"
)

// serverTLSFlags are the server's TLS and credential flags (README
// "Security"); they map onto node.Config's TLS fields.
type serverTLSFlags struct {
	caFile, certFile, keyFile string
	httpTLS                   bool
	httpClientAuth            string
	insecure                  bool
	tokenFile                 string
	metricsTokenFile          string
	openReads                 bool
}

func (f *serverTLSFlags) bind(fl *pflag.FlagSet) {
	d := node.DefaultConfig()
	fl.StringVar(&f.caFile, "tls-ca-file", "", "PEM file of the system CA: peers' certificates must chain to it (concord tls ca create)")
	fl.StringVar(&f.certFile, "tls-cert-file", "", "PEM server certificate of this node, used on every port (concord tls cert create --server)")
	fl.StringVar(&f.keyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	fl.BoolVar(&f.httpTLS, "http-tls", d.HTTPTLS, "serve MAP and the HTTP API over TLS (wss://, https://) when TLS material is given")
	fl.StringVar(&f.httpClientAuth, "http-client-auth", "request", "client certificates on the HTTP port: none, request (an operator certificate counts as a credential) or require")
	fl.BoolVar(&f.insecure, "insecure", false, "run without TLS: every port plaintext and unauthenticated (logged loudly; for isolated test networks only)")
	fl.StringVar(&f.tokenFile, "operator-token-file", "", "file holding the operator token accepted as an admin credential (or env "+operatorTokenEnv+")")
	fl.StringVar(&f.metricsTokenFile, "metrics-token-file", "", "file holding a token accepted for GET /metrics only (Authorization: Bearer), a scraper's credential with no other power (or env "+metricsTokenEnv+")")
	fl.BoolVar(&f.openReads, "http-open-reads", false, "serve /metrics and GET /v1/* (status, members, placement, run files: what the console reads) without a credential; always on with --dev (off: a member's or an operator's credential is required)")
}

// hasMaterial reports whether TLS files were given (TLS is then on).
func (f *serverTLSFlags) hasMaterial() bool {
	return (tlsconf.Config{CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile}).Enabled()
}

// apply fills cfg's TLS fields. Outside --dev, TLS material is required
// unless --insecure; --insecure also lets gossip run unencrypted when no
// gossip key is given and the data dir holds no keyring.
func (f *serverTLSFlags) apply(cfg *node.Config, dev bool) error {
	cfg.TLS = tlsconf.Config{CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile}
	auth, err := tlsconf.ParseClientAuth(f.httpClientAuth)
	if err != nil {
		return fmt.Errorf("--http-client-auth: %w", err)
	}
	// Open reads expose run results and agent placement past MAP's
	// visibility rules, so outside --dev they are an explicit choice.
	cfg.HTTPTLS, cfg.HTTPClientAuth, cfg.OpenReads = f.httpTLS, auth, f.openReads || dev
	if cfg.OperatorToken, err = tokenFrom("operator token", "--operator-token-file", f.tokenFile, operatorTokenEnv); err != nil {
		return err
	}
	if cfg.MetricsToken, err = tokenFrom("metrics token", "--metrics-token-file", f.metricsTokenFile, metricsTokenEnv); err != nil {
		return err
	}
	if len(cfg.MetricsToken) > 0 && string(cfg.MetricsToken) == string(cfg.OperatorToken) {
		return fmt.Errorf("the metrics token is the operator token: give the scraper a token of its own")
	}
	switch {
	case cfg.TLS.Enabled():
		cfg.Insecure = false
	case f.insecure:
		cfg.Insecure = true
		if len(cfg.GossipKey) == 0 && !node.HasKeyring(cfg.DataDir) {
			cfg.GossipPlaintext = true
		}
	case dev:
		cfg.Insecure = true
	default:
		return fmt.Errorf("TLS material is required: --tls-ca-file, --tls-cert-file and --tls-key-file " +
			"(concord tls ca create; concord tls cert create --server), or pass --insecure to run plaintext and unauthenticated")
	}
	return nil
}

// tokenFrom reads a token from file (flag names it) or else the variable
// env, refusing both at once (one would be silently ignored), and unsets
// env once read (as the gossip key: no child process needs it).
func tokenFrom(what, flag, file, env string) ([]byte, error) {
	if _, inEnv := os.LookupEnv(env); inEnv && file != "" {
		return nil, fmt.Errorf("%s given twice: %s and %s; keep one", what, flag, env)
	}
	tok, err := secretFrom(file, env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	_ = os.Unsetenv(env)
	return tok, nil
}

// secretFrom reads a secret from file (trailing newline removed) or, when
// file is empty, from the environment variable env. Empty when neither.
func secretFrom(file, env string) ([]byte, error) {
	if file == "" {
		return []byte(os.Getenv(env)), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("%s is empty", file)
	}
	return []byte(s), nil
}

// clientTLSFlags are the CLI's TLS flags: the CA to verify nodes with, an
// optional operator certificate, and the operator token.
type clientTLSFlags struct {
	caFile, certFile, keyFile, tokenFile string
}

func (f *clientTLSFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&f.caFile, "ca-file", os.Getenv("CONCORD_CA_FILE"), "PEM file of the system CA: connect with TLS (wss://, TLS gRPC) and verify the node (env CONCORD_CA_FILE)")
	fl.StringVar(&f.certFile, "cert-file", os.Getenv("CONCORD_CERT_FILE"), "PEM operator certificate presented to the node (env CONCORD_CERT_FILE)")
	fl.StringVar(&f.keyFile, "key-file", os.Getenv("CONCORD_KEY_FILE"), "PEM key of --cert-file (env CONCORD_KEY_FILE)")
	fl.StringVar(&f.tokenFile, "token-file", os.Getenv("CONCORD_TOKEN_FILE"), "file holding the operator token (env CONCORD_TOKEN_FILE)")
}

// enabled reports whether TLS is configured.
func (f *clientTLSFlags) enabled() bool { return f.caFile != "" }

// config returns the client tls.Config, nil without --ca-file.
func (f *clientTLSFlags) config() (*tls.Config, error) {
	if !f.enabled() {
		if f.certFile != "" {
			return nil, fmt.Errorf("--cert-file needs --ca-file")
		}
		return nil, nil
	}
	m, err := tlsconf.New(tlsconf.Config{CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile})
	if err != nil {
		return nil, err
	}
	return m.ClientConfig(tlsconf.Expect{}), nil
}

// token returns the operator token, "" when none is configured.
func (f *clientTLSFlags) token() (string, error) {
	if f.tokenFile == "" {
		return "", nil
	}
	b, err := secretFrom(f.tokenFile, "")
	return string(b), err
}

// reloadOnHangup reloads the node's TLS material and JWKS on every SIGHUP until the
// returned stop function is called (which waits for the goroutine).
func reloadOnHangup(srv *node.Server, log *slog.Logger) func() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-ch:
				if err := srv.ReloadTLS(); err != nil {
					log.Error("SIGHUP: tls reload failed", "err", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				if err := srv.ReloadJWKS(ctx); err != nil {
					log.Error("SIGHUP: JWKS reload failed; keeping the keys in use", "err", err)
				}
				cancel()
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(ch); close(done); <-stopped }
}
