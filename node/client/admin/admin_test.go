package admin_test

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/concordmap/concord/node"
	"github.com/concordmap/concord/node/client/admin"
	"github.com/concordmap/concord/node/cluster"
	"github.com/concordmap/concord/node/membership"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startDev starts a dev node of system sys with encrypted gossip (so the
// keyring is live) and returns it with an admin client of its gRPC port.
func startDev(t *testing.T, ctx context.Context, sys string) (*node.Server, *admin.Client) {
	t.Helper()
	cfg := node.DevConfig(t.TempDir())
	cfg.SystemID, cfg.NodeID = sys, sys+"-1"
	cfg.GossipPlaintext = false
	cfg.GossipKey = randomKey(t)
	srv, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return srv, admin.New(cc)
}

func randomKey(t *testing.T) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return cluster.WithAdminMarker(ctx)
}

func TestClusterMethods(t *testing.T) {
	ctx := testCtx(t)
	srv, c := startDev(t, ctx, "a")
	ms, err := c.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].ID != "a-1" || ms[0].Status != "alive" || ms[0].GRPC != srv.GRPCAddr() {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
	ps, err := c.RaftPeers(ctx)
	if err != nil || len(ps) != 1 || ps[0].ID != "a-1" || ps[0].Suffrage != "voter" || !ps[0].Leader {
		t.Fatalf("RaftPeers = %+v, %v", ps, err)
	}
	// The only server is alive in gossip: removing it is refused.
	if err := c.RemovePeer(ctx, "a-1", false); err == nil {
		t.Fatal("RemovePeer of a live server succeeded")
	}
	if err := c.RemovePeer(ctx, "", false); err == nil {
		t.Fatal("RemovePeer without an id succeeded")
	}
}

func TestKeyringRotation(t *testing.T) {
	ctx := testCtx(t)
	_, c := startDev(t, ctx, "a")
	before, err := c.KeyringList(ctx)
	if err != nil || len(before) != 1 || len(before[0].Keys) != 1 || !before[0].Keys[0].Primary {
		t.Fatalf("KeyringList = %+v, %v", before, err)
	}
	old := before[0].Keys[0].Fingerprint
	k := randomKey(t)
	fp := membership.KeyFingerprint(k)
	if res, err := c.KeyringInstall(ctx, k); err != nil || len(res) != 1 || res[0].Error != "" {
		t.Fatalf("install = %+v, %v", res, err)
	}
	if res, err := c.KeyringUse(ctx, fp); err != nil || len(res) != 1 || res[0].NodeID != "a-1" || res[0].Error != "" {
		t.Fatalf("use = %+v, %v", res, err)
	}
	if res, err := c.KeyringRemove(ctx, old); err != nil || len(res) != 1 || res[0].Error != "" {
		t.Fatalf("remove = %+v, %v", res, err)
	}
	after, err := c.KeyringList(ctx)
	if err != nil || len(after) != 1 || len(after[0].Keys) != 1 || after[0].Keys[0] != (admin.KeyringKey{Fingerprint: fp, Primary: true}) {
		t.Fatalf("KeyringList after rotation = %+v, %v", after, err)
	}
	// A refused change comes back per node, with the reason.
	if res, err := c.KeyringUse(ctx, "0000000000000000"); err != nil || len(res) != 1 || res[0].Error == "" {
		t.Fatalf("use of an unknown key = %+v, %v", res, err)
	}
}

func TestFederationLinkLifecycle(t *testing.T) {
	ctx := testCtx(t)
	_, a := startDev(t, ctx, "a")
	_, b := startDev(t, ctx, "b")
	exp, err := admin.ParsePolicy("role:worker")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := admin.ParsePolicy("all")
	st := admin.LinkSettings{Export: exp, Import: all, MaxHops: 3,
		Buffer: admin.Buffer{MaxMessages: 10, MaxBytes: 1 << 20, MaxAge: time.Minute, Overflow: admin.RejectNew},
		Outbox: admin.Outbox{Guaranteed: true, MaxMessages: 50, MaxBytes: 1 << 20}}
	token, err := a.CreatePeeringToken(ctx, "b", time.Minute, st)
	if err != nil || token == "" {
		t.Fatalf("CreatePeeringToken = %q, %v", token, err)
	}
	if _, err := b.CreateLink(ctx, "not-a-token", st); err == nil {
		t.Fatal("CreateLink with a bad token succeeded")
	}
	l, err := b.CreateLink(ctx, token, st)
	if err != nil || l.PeerSystemID != "a" || len(l.PeerAddrs) == 0 {
		t.Fatalf("CreateLink = %+v, %v", l, err)
	}
	links, err := b.ListLinks(ctx)
	if err != nil || links.SystemID != "b" || links.NodeID != "b-1" || len(links.Links) != 1 {
		t.Fatalf("ListLinks = %+v, %v", links, err)
	}
	got := links.Links[0]
	if got.PeerSystemID != "a" || got.Export.String() != "role:worker" || got.Import.String() != "all" ||
		got.MaxHops != 3 || got.Buffer != st.Buffer || got.Outbox != st.Outbox || got.HasPeerCA {
		t.Fatalf("link as listed = %+v", got)
	}
	res, err := b.Unlink(ctx, "a", false)
	if err != nil || !res.PeerNotified || res.PeerError != "" {
		t.Fatalf("Unlink = %+v, %v", res, err)
	}
	if links, err := b.ListLinks(ctx); err != nil || len(links.Links) != 0 || len(links.PendingUnlinks) != 0 {
		t.Fatalf("ListLinks after unlink = %+v, %v", links, err)
	}
}

func TestBufferOverflowNames(t *testing.T) {
	ctx := testCtx(t)
	_, c := startDev(t, ctx, "a")
	tests := []struct {
		overflow string
		valid    bool
	}{
		{admin.DropOldest, true}, {admin.DropNewest, true}, {admin.RejectNew, true},
		{"default", false}, {"", false}, {"DROP-OLDEST", false},
	}
	for _, tt := range tests {
		if got := admin.ValidOverflow(tt.overflow); got != tt.valid {
			t.Errorf("ValidOverflow(%q) = %v, want %v", tt.overflow, got, tt.valid)
		}
		if tt.valid {
			continue
		}
		st := admin.LinkSettings{Buffer: admin.Buffer{MaxMessages: 1, MaxBytes: 1, MaxAge: time.Second, Overflow: tt.overflow}}
		if _, err := c.CreatePeeringToken(ctx, "b", time.Minute, st); err == nil || !strings.Contains(err.Error(), "overflow") {
			t.Errorf("CreatePeeringToken with overflow %q: %v", tt.overflow, err)
		}
	}
}

func TestPolicyRoundTrip(t *testing.T) {
	for _, s := range []string{"none", "all", "role:worker", "name:calc-*", "tag:gpu"} {
		p, err := admin.ParsePolicy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePolicy(%q).String() = %q, %v", s, p.String(), err)
		}
	}
	if _, err := admin.ParsePolicy("bogus:x"); err == nil {
		t.Error("ParsePolicy accepted bogus:x")
	}
}

func TestAPIKeys(t *testing.T) {
	ctx := testCtx(t)
	_, c := startDev(t, ctx, "a")
	key, secret, err := c.CreateAPIKey(ctx, admin.KeySpec{Participant: "ops-*", Types: []string{"client"},
		Description: "ci", TTL: time.Hour})
	if err != nil || !strings.HasPrefix(secret, "map_sk_") || key.Participant != "ops-*" || key.Expires.Sub(key.Created) != time.Hour {
		t.Fatalf("CreateAPIKey = %+v %q, %v", key, secret, err)
	}
	keys, err := c.ListAPIKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != key.ID || keys[0].Description != "ci" || !slices.Equal(keys[0].Types, []string{"client"}) {
		t.Fatalf("ListAPIKeys = %+v, %v", keys, err)
	}
	if err := c.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeAPIKey(ctx, key.ID); err == nil {
		t.Fatal("second revoke succeeded")
	}
}
