package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/oklog/ulid/v2"
)

// KeyPrefix starts every API key, so scanners and people recognise one.
const KeyPrefix = "map_sk_"

// secretBytes is the entropy of a key's secret (map-protocol.md §3.6: at
// least 256 bits).
const secretBytes = 32

var (
	errKeyFormat = errors.New("malformed API key")
	idLen        = len(ulid.Make().String())
	secretLen    = base64.RawURLEncoding.EncodedLen(secretBytes)
	// keyLen is the exact length of a well-formed key.
	keyLen = len(KeyPrefix) + idLen + 1 + secretLen
)

// NewKey returns a fresh key's public id, its full token (shown once) and
// the hash of its secret (what Raft stores).
func NewKey() (id, token string, hash []byte) {
	var secret [secretBytes]byte
	_, _ = rand.Read(secret[:]) // crypto/rand.Read never fails (Go 1.24+)
	id = ulid.Make().String()
	s := base64.RawURLEncoding.EncodeToString(secret[:])
	h := sha256.Sum256([]byte(s))
	return id, KeyPrefix + id + "_" + s, h[:]
}

// ParseKey splits a token into its id and the hash of its secret. It
// checks the shape only; whether the key exists is the module's business.
func ParseKey(token string) (id string, hash []byte, err error) {
	if len(token) != keyLen || !strings.HasPrefix(token, KeyPrefix) {
		return "", nil, errKeyFormat
	}
	rest := token[len(KeyPrefix):]
	id, secret := rest[:idLen], rest[idLen+1:]
	if rest[idLen] != '_' {
		return "", nil, errKeyFormat
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return "", nil, errKeyFormat
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(b) != secretBytes {
		return "", nil, errKeyFormat
	}
	h := sha256.Sum256([]byte(secret))
	return id, h[:], nil
}
