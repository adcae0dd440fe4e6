package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/concordmap/concord/node/tlsconf"
)

// clientTLS is the demo's own client side (status polls, the observer):
// it trusts the demo CA and presents the operator certificate. Set by
// makeTLS before any node starts.
var clientTLS *tls.Config

// makeTLS creates the demo system's throwaway CA, a server certificate
// per node and an operator certificate with `concord tls`, as an operator
// would, and points the agents and `concord argue` (children of this
// process) at the CA through CONCORD_CA_FILE.
func makeTLS(bin, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cmds := [][]string{{"tls", "ca", "create", "--system-id", "demo", "--dir", dir}}
	for i := 1; i <= 3; i++ {
		cmds = append(cmds, []string{"tls", "cert", "create", "--server", "--system-id", "demo", "--node-id", fmt.Sprintf("node%d", i), "--dir", dir})
	}
	cmds = append(cmds, []string{"tls", "cert", "create", "--client", "--system-id", "demo", "--name", "demo", "--dir", dir})
	for _, args := range cmds {
		if _, err := exec1(bin, args...); err != nil {
			return err
		}
	}
	ca := filepath.Join(dir, "demo-ca.pem")
	m, err := tlsconf.New(tlsconf.Config{CAFile: ca,
		CertFile: filepath.Join(dir, "demo-client-demo.pem"), KeyFile: filepath.Join(dir, "demo-client-demo-key.pem")})
	if err != nil {
		return fmt.Errorf("load the demo's TLS material: %w", err)
	}
	clientTLS = m.ClientConfig(tlsconf.Expect{})
	return os.Setenv("CONCORD_CA_FILE", ca)
}
