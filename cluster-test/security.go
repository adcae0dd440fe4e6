package clustertest

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// SystemID is the system id of FastConfig's nodes; their certificates come
// from its throwaway test CA (tlstest), generated once per test binary.
const SystemID = "clustertest"

// ClientTLS is the TLS config of the harness's MAP clients: it trusts the
// test CA and presents no certificate, like an SDK.
func ClientTLS() *tls.Config { return tlstest.ClientTLS(SystemID, "") }

// OperatorTLS presents the test operator's certificate: the CLI's admin
// calls.
func OperatorTLS() *tls.Config { return tlstest.ClientTLS(SystemID, "operator") }

// adminConn dials a node's gRPC port as the operator (the CLI's admin
// credential), outside the fault network.
func adminConn(addr string) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(OperatorTLS())))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}

// serverTLSArgs writes node id's test certificate under dir/tls-ID and
// returns the `concord server` flags that use it.
func serverTLSArgs(dir, id string) ([]string, error) { return systemTLSArgs(dir, SystemID, id) }

// systemTLSArgs is serverTLSArgs for a node of system (its own test CA).
func systemTLSArgs(dir, system, id string) ([]string, error) {
	d := filepath.Join(dir, "tls-"+id)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, fmt.Errorf("tls dir: %w", err)
	}
	c, err := tlstest.Files(d, tlstest.Server(system, id))
	if err != nil {
		return nil, err
	}
	return []string{"--tls-ca-file", c.CAFile, "--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile}, nil
}

// OperatorEnv writes the test operator's certificate under t.TempDir()
// and returns the environment that makes the concord CLI use it
// (CONCORD_CA_FILE, CONCORD_CERT_FILE, CONCORD_KEY_FILE).
func OperatorEnv(t testing.TB) []string {
	t.Helper()
	return OperatorEnvFor(t, SystemID)
}

// OperatorEnvFor is OperatorEnv for the operator of system (its test CA).
func OperatorEnvFor(t testing.TB, system string) []string {
	t.Helper()
	c, err := tlstest.Files(t.TempDir(), tlstest.Operator(system, "operator"))
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	return []string{"CONCORD_CA_FILE=" + c.CAFile, "CONCORD_CERT_FILE=" + c.CertFile, "CONCORD_KEY_FILE=" + c.KeyFile}
}
