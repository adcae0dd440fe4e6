package membership

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/memberlist"
)

// Gossip key rotation, as Serf and Consul do it: install the new key on
// every node (each then decrypts with either key), make it primary
// everywhere (each then encrypts with it), remove the old one. The ring
// persists in Config.KeyringFile so a restarted node keeps the rotated
// keys; the fan-out to every node is node/cluster's (the admin service).

// KeyFingerprint names a key in logs, errors and `concord keyring list`
// without revealing it: the first 8 bytes of its SHA-256, in hex.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// keyringDoc is the keyring file: base64 keys, the primary first.
type keyringDoc struct {
	Keys []string `json:"keys"`
}

// loadKeyring reads a keyring file; fs.ErrNotExist when there is none.
func loadKeyring(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc keyringDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("keyring %s: %w", path, err)
	}
	if len(doc.Keys) == 0 {
		return nil, fmt.Errorf("keyring %s holds no key", path)
	}
	keys := make([][]byte, 0, len(doc.Keys))
	for i, k := range doc.Keys {
		key, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, fmt.Errorf("keyring %s: key %d: %w", path, i, err)
		}
		if err := memberlist.ValidateKey(key); err != nil {
			return nil, fmt.Errorf("keyring %s: key %d: %w", path, i, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// saveKeyring writes keys (primary first) to path atomically, readable by
// the owner only: a temporary file is written and synced, then renamed
// over the old one, and the directory synced, so a crash leaves either
// the old ring or the new one.
func saveKeyring(path string, keys [][]byte) error {
	doc := keyringDoc{Keys: make([]string, len(keys))}
	for i, k := range keys {
		doc.Keys[i] = base64.StdEncoding.EncodeToString(k)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode keyring: %w", err)
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write keyring: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write keyring: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write keyring: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("sync keyring: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write keyring: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace keyring: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// initialKeys decides the keys gossip starts with: the persisted ring when
// there is one (a configured key that is not in it is ignored, with a
// warning: after a rotation the old key file is stale, and re-adding a
// removed key would undo the rotation), else the configured key, which
// then seeds the ring file.
func (m *Membership) initialKeys() ([][]byte, error) {
	cfgKey := m.cfg.GossipKey
	if m.cfg.KeyringFile != "" {
		keys, err := loadKeyring(m.cfg.KeyringFile)
		switch {
		case err == nil:
			if len(cfgKey) > 0 && !containsKey(keys, cfgKey) {
				m.log.Warn("configured gossip key is not in the keyring; using the keyring",
					"keyring", m.cfg.KeyringFile, "key", KeyFingerprint(cfgKey), "primary", KeyFingerprint(keys[0]))
			}
			return keys, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, err
		}
	}
	if len(cfgKey) == 0 {
		if m.cfg.AllowPlaintext {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: no gossip key: give one on first start (--gossip-key-file or CONCORD_GOSSIP_KEY); no keyring at %s",
			ErrInvalidConfig, m.cfg.KeyringFile)
	}
	keys := [][]byte{bytes.Clone(cfgKey)}
	if m.cfg.KeyringFile != "" {
		if err := saveKeyring(m.cfg.KeyringFile, keys); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func containsKey(keys [][]byte, key []byte) bool {
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

// Keys returns the installed gossip keys, the primary (used to encrypt)
// first; nil when gossip is plaintext. Safe for concurrent use.
func (m *Membership) Keys() [][]byte {
	if m.keyring == nil {
		return nil
	}
	primary := m.keyring.GetPrimaryKey()
	out := [][]byte{primary}
	for _, k := range m.keyring.GetKeys() {
		if !bytes.Equal(k, primary) {
			out = append(out, k)
		}
	}
	return out
}

// InstallKey adds key to the ring (it decrypts with it from now on) and
// persists the ring. Installing a key twice is a no-op.
func (m *Membership) InstallKey(key []byte) error {
	return m.changeKeyring(m.keyring.AddKey, func() error { return m.keyring.RemoveKey(key) }, key, "installed")
}

// UseKey makes an installed key the primary one (gossip is encrypted with
// it from now on) and persists the ring.
func (m *Membership) UseKey(key []byte) error {
	if m.keyring == nil {
		return ErrNoKeyring
	}
	prev := m.keyring.GetPrimaryKey()
	return m.changeKeyring(m.keyring.UseKey, func() error { return m.keyring.UseKey(prev) }, key, "made primary")
}

// RemoveKey removes a key that is not the primary one and persists the
// ring. Removing a key that is not installed is a no-op.
func (m *Membership) RemoveKey(key []byte) error {
	return m.changeKeyring(m.keyring.RemoveKey, func() error { return m.keyring.AddKey(key) }, key, "removed")
}

// changeKeyring applies op to the live ring, persists it, and undoes op
// when the ring cannot be written, so memory and file never disagree for
// long. keyMu serializes changes, so the file always holds the latest.
func (m *Membership) changeKeyring(op func([]byte) error, undo func() error, key []byte, what string) error {
	if m.keyring == nil {
		return ErrNoKeyring
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	if err := op(key); err != nil {
		return fmt.Errorf("%w: %w", ErrKeyring, err)
	}
	if m.cfg.KeyringFile != "" {
		if err := saveKeyring(m.cfg.KeyringFile, m.Keys()); err != nil {
			if uerr := undo(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undo keyring change: %w", uerr))
			}
			return err
		}
	}
	m.log.Info("gossip keyring changed", "change", what, "key", KeyFingerprint(key), "keys", len(m.keyring.GetKeys()))
	return nil
}
