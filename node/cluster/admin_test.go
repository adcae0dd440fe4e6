package cluster

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// memKeyring is a Keyring in memory, with memberlist's rules.
type memKeyring struct {
	mu   sync.Mutex
	keys [][]byte // primary first
}

func (k *memKeyring) Keys() [][]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.keys)
}

func (k *memKeyring) index(key []byte) int {
	return slices.IndexFunc(k.keys, func(x []byte) bool { return bytes.Equal(x, key) })
}

func (k *memKeyring) InstallKey(key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(key) != 32 {
		return fmt.Errorf("%w: key size", membership.ErrKeyring)
	}
	if k.index(key) < 0 {
		k.keys = append(k.keys, key)
	}
	return nil
}

func (k *memKeyring) UseKey(key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	i := k.index(key)
	if i < 0 {
		return fmt.Errorf("%w: not installed", membership.ErrKeyring)
	}
	k.keys[0], k.keys[i] = k.keys[i], k.keys[0]
	return nil
}

func (k *memKeyring) RemoveKey(key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch i := k.index(key); {
	case i == 0:
		return fmt.Errorf("%w: primary", membership.ErrKeyring)
	case i > 0:
		k.keys = slices.Delete(k.keys, i, i+1)
	}
	return nil
}

func adminClient(t *testing.T, addr string) concordv1.AdminClient {
	t.Helper()
	return concordv1.NewAdminClient(dialTest(t, addr))
}

// A keyring change sent to one node reaches every alive member (one hop
// each), reports a dead member as not reached, and is idempotent.
func TestAdmin_KeyringFansOut(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	fm := newFakeMembers()
	rings := map[string]*memKeyring{}
	var first *runningServer
	for _, id := range []string{"a", "b", "c"} {
		rings[id] = &memKeyring{keys: [][]byte{k1}}
		srv := startServer(t, testConfig(t, id), ServerDeps{Store: &fakeStore{id: id}, Members: fm, Keyring: rings[id]}, nil)
		fm.set(membership.Member{ID: id, Status: membership.StatusAlive, NodeMeta: membership.NodeMeta{GRPCAddr: srv.addr}})
		if first == nil {
			first = srv
		}
	}
	fm.set(membership.Member{ID: "d", Status: membership.StatusDead, NodeMeta: membership.NodeMeta{GRPCAddr: "127.0.0.1:1"}})
	c := adminClient(t, first.addr)
	ctx := WithAdminMarker(testCtx(t))

	res, err := c.KeyringInstall(ctx, &concordv1.KeyringInstallRequest{Key: k2})
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, n := range res.GetNodes() {
		if n.GetError() != "" {
			failed = append(failed, n.GetNodeId())
		}
	}
	if len(res.GetNodes()) != 4 || !slices.Equal(failed, []string{"d"}) {
		t.Fatalf("install results %v, want a, b, c ok and d not reached", res.GetNodes())
	}
	fp2, fp1 := membership.KeyFingerprint(k2), membership.KeyFingerprint(k1)
	for _, step := range []func() error{
		func() error { _, err := c.KeyringUse(ctx, &concordv1.KeyringUseRequest{Fingerprint: fp2}); return err },
		func() error {
			_, err := c.KeyringRemove(ctx, &concordv1.KeyringRemoveRequest{Fingerprint: fp1})
			return err
		},
		func() error {
			_, err := c.KeyringRemove(ctx, &concordv1.KeyringRemoveRequest{Fingerprint: fp1})
			return err
		}, // again: a no-op
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	for id, r := range rings {
		if keys := r.Keys(); len(keys) != 1 || !bytes.Equal(keys[0], k2) {
			t.Fatalf("%s holds %x, want only the new key", id, keys)
		}
	}
	list, err := c.KeyringList(ctx, &concordv1.KeyringListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.GetNodes() {
		if n.GetNodeId() == "d" {
			continue
		}
		if len(n.GetKeys()) != 1 || n.GetKeys()[0].GetFingerprint() != fp2 || !n.GetKeys()[0].GetPrimary() {
			t.Fatalf("list for %s: %v", n.GetNodeId(), n)
		}
	}
	// Refused changes come back per node, with the reason.
	res2, err := c.KeyringUse(ctx, &concordv1.KeyringUseRequest{Fingerprint: "0000000000000000"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res2.GetNodes() {
		if n.GetError() == "" {
			t.Fatalf("use of an unknown fingerprint succeeded on %s", n.GetNodeId())
		}
	}
}

func TestAdmin_KeyringWithoutEncryption(t *testing.T) {
	srv := startServer(t, testConfig(t, "a"), ServerDeps{Store: &fakeStore{id: "a"}}, nil)
	_, err := adminClient(t, srv.addr).KeyringList(testCtx(t), &concordv1.KeyringListRequest{LocalOnly: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("KeyringList on plaintext gossip = %v, want FailedPrecondition", err)
	}
}

func TestIsAdminMethod(t *testing.T) {
	for m, want := range map[string]bool{
		concordv1.Admin_KeyringInstall_FullMethodName: true,
		concordv1.Admin_KeyringList_FullMethodName:    true,
		concordv1.Cluster_RemovePeer_FullMethodName:   true,
		concordv1.Snapshots_Save_FullMethodName:       true,
		concordv1.Snapshots_Restore_FullMethodName:    true,
		concordv1.Cluster_Forward_FullMethodName:      false,
		concordv1.Cluster_Status_FullMethodName:       false,
		"/concord.v1.AdminX/Foo":                      false,
	} {
		if got := IsAdminMethod(m); got != want {
			t.Errorf("IsAdminMethod(%s) = %v, want %v", m, got, want)
		}
	}
}
