package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCmd is the probe a container runtime runs inside the image,
// which has no shell or curl: exit 0 when the node answers 200.
func newHealthCmd() *cobra.Command {
	var (
		url, caFile    string
		ready, skipTLS bool
		timeout        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Probe a node's /v1/health (or /v1/ready with --ready); exit status 0 when it answers 200",
		Long: `Probe a node's /v1/health (liveness) or, with --ready, /v1/ready (caught up with
the leader). Exit status 0 when the node answers 200, 1 otherwise: the
container image's HEALTHCHECK runs it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := "/v1/health"
			if ready {
				path = "/v1/ready"
			}
			client, err := probeClient(caFile, skipTLS)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return probe(ctx, client, strings.TrimSuffix(url, "/")+path, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:7700", "base URL of the node's HTTP port (https:// when it serves TLS)")
	cmd.Flags().BoolVar(&ready, "ready", false, "probe readiness (/v1/ready) instead of liveness (/v1/health)")
	cmd.Flags().StringVar(&caFile, "ca-file", "", "CA certificate (PEM) that signed the node's certificate, for https://")
	cmd.Flags().BoolVar(&skipTLS, "insecure-skip-verify", false, "accept any certificate (a local probe of 127.0.0.1 only)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "deadline for the probe")
	return cmd
}

func probeClient(caFile string, skipVerify bool) (*http.Client, error) {
	// InsecureSkipVerify only on request: a probe of the node on 127.0.0.1.
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skipVerify}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--ca-file: no PEM certificate in the file")
		}
		tc.RootCAs = pool
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

func probe(ctx context.Context, client *http.Client, url string, out io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = fmt.Fprintln(out, strings.TrimSpace(string(body)))
	return err
}
