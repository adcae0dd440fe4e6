package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/concordmap/concord/node/tlsconf"
)

// makeTLS creates a demo system's throwaway CA, a server certificate per
// node and an operator certificate "demo" with `concord tls`, as an
// operator would. It returns the client side the demo itself uses
// (status polls, the observer, the admin API): it trusts the system's CA
// and presents the operator certificate.
func makeTLS(bin, dir, system string) (*tls.Config, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cmds := [][]string{{"tls", "ca", "create", "--system-id", system, "--dir", dir}}
	for i := 1; i <= 3; i++ {
		cmds = append(cmds, []string{"tls", "cert", "create", "--server", "--system-id", system, "--node-id", fmt.Sprintf("node%d", i), "--dir", dir})
	}
	cmds = append(cmds, []string{"tls", "cert", "create", "--client", "--system-id", system, "--name", "demo", "--dir", dir})
	for _, args := range cmds {
		if _, err := exec1(bin, args...); err != nil {
			return nil, err
		}
	}
	m, err := tlsconf.New(tlsconf.Config{CAFile: filepath.Join(dir, system+"-ca.pem"),
		CertFile: filepath.Join(dir, system+"-client-demo.pem"), KeyFile: filepath.Join(dir, system+"-client-demo-key.pem")})
	if err != nil {
		return nil, fmt.Errorf("load the demo's TLS material: %w", err)
	}
	return m.ClientConfig(tlsconf.Expect{}), nil
}
