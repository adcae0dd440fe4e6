package node_test

import (
	"net/http"
	"time"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// secure turns TLS on in c with the test CA of c's system: tests run the
// way production does, with mutual TLS between nodes and https/wss.
func secure(c *node.Config) {
	c.TLS = tlstest.Server(c.SystemID, c.NodeID)
	c.Insecure = false
}

// httpsClient trusts the test CA of systemID and presents operator's
// certificate (operator "" presents none).
func httpsClient(systemID, operator string) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlstest.ClientTLS(systemID, operator)},
	}
}
