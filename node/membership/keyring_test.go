package membership

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Rotation as an operator runs it (install everywhere, use everywhere,
// remove the old key everywhere) keeps two nodes gossiping, and a node
// restarted afterwards comes back with the rotated ring from its file and
// joins again.
func TestKeyring_RotationKeepsGossipAndPersists(t *testing.T) {
	dir := t.TempDir()
	cfgA := testConfig(t, "a")
	cfgA.KeyringFile = filepath.Join(dir, "a.keyring")
	a := mustStart(t, cfgA)
	cfgB := testConfig(t, "b")
	cfgB.KeyringFile = filepath.Join(dir, "b.keyring")
	cfgB.JoinAddrs = []string{a.LocalMember().GossipAddr}
	b, err := New(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopB := func() {
		if err := b.Shutdown(); err != nil {
			t.Errorf("shutdown b: %v", err)
		}
	}
	defer func() { stopB() }()
	eventually(t, 5*time.Second, func() error { return seesAlive(a, []string{"a", "b"}) })

	both := []*Membership{a, b}
	for _, step := range []func(m *Membership) error{
		func(m *Membership) error { return m.InstallKey(otherKey) },
		func(m *Membership) error { return m.UseKey(otherKey) },
		func(m *Membership) error { return m.RemoveKey(testKey) },
	} {
		for _, m := range both {
			if err := step(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range both {
		if keys := m.Keys(); len(keys) != 1 || !bytes.Equal(keys[0], otherKey) {
			t.Fatalf("%s keys %x, want only the new key", m.cfg.NodeID, keys)
		}
	}
	// Gossip still flows: b restarts from its ring file and a sees it
	// come back alive.
	stopB()
	eventually(t, 5*time.Second, func() error { return seesAlive(a, []string{"a"}) })
	cfgB2 := cfgB
	cfgB2.GossipKey = testKey // the stale key file: the ring wins
	b2 := mustStart(t, cfgB2)
	if keys := b2.Keys(); len(keys) != 1 || !bytes.Equal(keys[0], otherKey) {
		t.Fatalf("restarted keys %x, want the rotated ring", keys)
	}
	eventually(t, 5*time.Second, func() error { return seesAlive(a, []string{"a", "b"}) })
	stopB = func() {}

	info, err := os.Stat(cfgB.KeyringFile)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Fatalf("keyring file mode %v, want 0600", mode)
	}
}

func TestKeyring_RefusedChanges(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.KeyringFile = filepath.Join(t.TempDir(), "keyring")
	a := mustStart(t, cfg)
	if err := a.RemoveKey(testKey); !errors.Is(err, ErrKeyring) {
		t.Fatalf("removing the primary: %v, want ErrKeyring", err)
	}
	if err := a.UseKey(otherKey); !errors.Is(err, ErrKeyring) {
		t.Fatalf("using a key not installed: %v, want ErrKeyring", err)
	}
	if err := a.InstallKey([]byte("short")); !errors.Is(err, ErrKeyring) {
		t.Fatalf("installing a 5-byte key: %v, want ErrKeyring", err)
	}
	keys, err := loadKeyring(cfg.KeyringFile)
	if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], testKey) {
		t.Fatalf("ring file %x, %v: want only the first key", keys, err)
	}

	plain := testConfig(t, "p")
	plain.GossipKey, plain.AllowPlaintext = nil, true
	p := mustStart(t, plain)
	if err := p.InstallKey(otherKey); !errors.Is(err, ErrNoKeyring) {
		t.Fatalf("install on plaintext gossip: %v, want ErrNoKeyring", err)
	}
}

func TestKeyring_FirstStartNeedsAKey(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.GossipKey = nil
	cfg.KeyringFile = filepath.Join(t.TempDir(), "keyring")
	if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New without key or ring: %v, want ErrInvalidConfig", err)
	}
	if err := os.WriteFile(cfg.KeyringFile, []byte(`{"keys":["bm90IGEga2V5"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil {
		t.Fatal("New with a ring holding a 9-byte key succeeded")
	}
}
