package federation

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// tokenPrefix versions the token's text form.
const tokenPrefix = "concordfed1."

// maxTokenLen bounds what DecodeToken reads (a CA PEM and a few addresses
// fit easily).
const maxTokenLen = 64 << 10

// secretLen is the token secret's length in bytes.
const secretLen = 32

// NewSecret returns a fresh random token secret.
func NewSecret() ([]byte, error) {
	b := make([]byte, secretLen)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("federation: token secret: %w", err)
	}
	return b, nil
}

// HashSecret is what the issuing system stores instead of the secret.
func HashSecret(secret []byte) []byte {
	h := sha256.Sum256(secret)
	return h[:]
}

// EncodeToken renders t as the text an operator copies.
func EncodeToken(t *concordv1.FedToken) (string, error) {
	b, err := proto.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("federation: encode token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// DecodeToken parses a token (outside input): ErrBadToken, wrapped with
// what is wrong, unless it is well formed.
func DecodeToken(s string) (*concordv1.FedToken, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxTokenLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadToken, maxTokenLen)
	}
	body, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: missing %q prefix", ErrBadToken, tokenPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	var t concordv1.FedToken
	if err := proto.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	switch {
	case !validSystemID(t.GetSystemId()):
		return nil, fmt.Errorf("%w: bad system id", ErrBadToken)
	case !validSystemID(t.GetPeerSystemId()):
		return nil, fmt.Errorf("%w: bad peer system id", ErrBadToken)
	case len(t.GetAddrs()) == 0 || len(t.GetAddrs()) > 64:
		return nil, fmt.Errorf("%w: needs 1..64 server addresses", ErrBadToken)
	case len(t.GetSecret()) != secretLen:
		return nil, fmt.Errorf("%w: bad secret length", ErrBadToken)
	case t.GetExpiresAtMs() <= 0:
		return nil, fmt.Errorf("%w: no expiry", ErrBadToken)
	}
	for _, a := range t.GetAddrs() {
		if a == "" || len(a) > 255 {
			return nil, fmt.Errorf("%w: bad server address", ErrBadToken)
		}
	}
	return &t, nil
}
