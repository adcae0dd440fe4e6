package tlsconf_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concordmap/concord/node/pki"
	"github.com/concordmap/concord/node/tlsconf"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(a raft.ServerAddress, d time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(a), d)
}

func layer(t *testing.T, system, node string, authorize func(pki.Identity) error) raft.StreamLayer {
	t.Helper()
	m, err := tlsconf.New(tlstest.Server(system, node))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := m.StreamLayer(tcpLayer{ln}, authorize)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestStreamLayer_MutualTLS: two members exchange bytes; a peer the
// acceptor's authorize refuses, and a peer of another CA, fail to dial.
func TestStreamLayer_MutualTLS(t *testing.T) {
	allow := func(pki.Identity) error { return nil }
	onlyN2 := func(id pki.Identity) error {
		if id.Name != "n2" {
			return errors.New("not a member")
		}
		return nil
	}
	srv := layer(t, "lsys", "n1", onlyN2)
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	for _, tc := range []struct {
		name string
		l    raft.StreamLayer
		ok   bool
	}{
		{"member", layer(t, "lsys", "n2", allow), true},
		{"non-member", layer(t, "lsys", "n3", allow), false},
		{"other CA", layer(t, "lsys-other", "n2", allow), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.l.Dial(raft.ServerAddress(srv.Addr().String()), 2*time.Second)
			if err == nil {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err = c.Write([]byte("ping")); err == nil {
					_, err = io.ReadFull(c, make([]byte, 4))
				}
			}
			if (err == nil) != tc.ok {
				t.Fatalf("exchange: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
