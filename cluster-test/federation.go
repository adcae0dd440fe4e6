package clustertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// FederationClient dials node i's gRPC port for the Federation service
// (the admin API of `concord federation`); the connection closes with t.
func (c *Cluster) FederationClient(t testing.TB, i int) concordv1.FederationClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if srv := c.Node(i).Server(); srv != nil && srv.TLSEnabled() {
		creds = credentials.NewTLS(tlstest.ClientTLS(c.SystemID(), "operator"))
	}
	conn, err := grpc.NewClient(c.Node(i).GRPCAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("clustertest: dial %s: %v", c.Node(i), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return concordv1.NewFederationClient(conn)
}

// LinkSpec is how Link peers two systems.
type LinkSpec struct {
	// FromExport is what `from` shows `to`; ToExport the reverse. nil
	// exports nothing.
	FromExport, ToExport *concordv1.FedPolicy
	// Transitive is set on both sides of the link.
	Transitive bool
	// MaxHops bounds envelopes `from` originates over the link (0: default).
	MaxHops uint32
	// FromOutbox is from's guaranteed-delivery policy over the link.
	FromOutbox *concordv1.FedOutboxPolicy
	// Buffer is the outage buffer policy of both sides (nil: default).
	Buffer *concordv1.FedBufferPolicy
}

// Link peers two systems the way an operator does: a token issued on
// `to` for from's system, redeemed on `from`. It fails t on error. A call
// whose outcome is unknown (UNAVAILABLE: leadership moved while it
// committed, which a loaded host sees) is retried as an operator would: a
// second token is harmless, and a redeem that did commit answers "already
// linked" to its retry.
func Link(t testing.TB, from, to *Cluster, spec LinkSpec) {
	t.Helper()
	var tok *concordv1.CreateTokenResponse
	retryUnavailable(t, fmt.Sprintf("federation token on %s", to.SystemID()), func(ctx context.Context, _ bool) error {
		var err error
		tok, err = to.FederationClient(t, 0).CreateToken(ctx, &concordv1.CreateTokenRequest{
			PeerSystemId: from.SystemID(), Export: spec.ToExport, Transitive: spec.Transitive, Buffer: spec.Buffer})
		return err
	})
	retryUnavailable(t, fmt.Sprintf("federation link %s -> %s", from.SystemID(), to.SystemID()), func(ctx context.Context, retry bool) error {
		_, err := from.FederationClient(t, len(from.Nodes())-1).CreateLink(ctx, &concordv1.CreateLinkRequest{
			Token: tok.GetToken(), Export: spec.FromExport, Transitive: spec.Transitive, MaxHops: spec.MaxHops,
			Outbox: spec.FromOutbox, Buffer: spec.Buffer})
		if retry && err != nil && strings.Contains(err.Error(), "already linked to "+to.SystemID()) {
			return nil // the earlier attempt committed
		}
		return err
	})
}

// retryUnavailable runs call (each with CallTimeout) until it succeeds, for
// up to LeaderTimeout while it fails with UNAVAILABLE; any other error, or
// the last one, fails t. retry says whether an earlier attempt was made.
func retryUnavailable(t testing.TB, what string, call func(ctx context.Context, retry bool) error) {
	t.Helper()
	attempts := 0
	err := Poll(context.Background(), LeaderTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		err := call(ctx, attempts > 0)
		attempts++
		if err != nil && status.Code(err) != codes.Unavailable {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("clustertest: %s (%d attempts): %v", what, attempts, err)
	}
}

// SystemID is the cluster's system id.
func (c *Cluster) SystemID() string {
	if c.opts.systemID != "" {
		return c.opts.systemID
	}
	return FastConfig().SystemID
}

// LinkUp returns nil once every running node of c has its stream to peer
// up (an Eventually check).
func (c *Cluster) LinkUp(peer string) error {
	for _, n := range c.Running() {
		srv := n.Server()
		if srv == nil || srv.Federation() == nil {
			return fmt.Errorf("%s not running", n)
		}
		up := false
		for _, st := range srv.Federation().Status() {
			if st.GetLink().GetPeerSystemId() == peer && st.GetState() == "up" {
				up = true
			}
		}
		if !up {
			return fmt.Errorf("%s: link to %s not up", n, peer)
		}
	}
	return nil
}

// NodeIDs lists the cluster's node ids (for faultnet partitions between
// systems).
func (c *Cluster) NodeIDs() []string {
	var out []string
	for _, n := range c.Nodes() {
		out = append(out, n.ID)
	}
	return out
}
