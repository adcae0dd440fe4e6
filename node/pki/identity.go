package pki

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Role is what a certificate's holder is in its system.
type Role string

const (
	// RoleServer is a node of the system; the identity's Name is its node id.
	RoleServer Role = "server"
	// RoleOperator is a person or tool administering the system (the CLI).
	RoleOperator Role = "operator"
)

// uriScheme is the scheme of identity URI SANs.
const uriScheme = "concord"

// Identity is who a certificate names: concord://SystemID/Role/Name.
type Identity struct {
	SystemID string
	Role     Role
	Name     string
}

// String returns the identity URI.
func (i Identity) String() string { return i.URI().String() }

// URI returns the identity as the URI put into certificates.
func (i Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: i.SystemID, Path: "/" + string(i.Role) + "/" + i.Name}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// CheckName returns ErrBadName (wrapped, naming what) unless name is 1 to 63
// characters of [A-Za-z0-9_-] starting with a letter or digit: ids go into
// DNS SANs, URI SANs and file names.
func CheckName(what, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s %q: want 1-63 characters of A-Z a-z 0-9 _ - (starting with a letter or digit)", ErrBadName, what, name)
	}
	return nil
}

// ParseIdentity parses an identity URI (concord://SYSTEM/ROLE/NAME).
func ParseIdentity(u *url.URL) (Identity, error) {
	if u == nil || u.Scheme != uriScheme {
		return Identity{}, ErrNoIdentity
	}
	role, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	id := Identity{SystemID: u.Host, Role: Role(role), Name: name}
	if !ok || (id.Role != RoleServer && id.Role != RoleOperator) {
		return Identity{}, fmt.Errorf("%w: %s: want concord://SYSTEM/server/NODE or concord://SYSTEM/operator/NAME", ErrNoIdentity, u)
	}
	if err := CheckName("system id", id.SystemID); err != nil {
		return Identity{}, err
	}
	if err := CheckName(string(id.Role)+" name", id.Name); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// IdentityOf returns the identity in cert's URI SANs. A certificate with
// more than one concord:// URI is refused: which one counts would be a guess.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == uriScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Identity{}, ErrNoIdentity
	case 1:
		return ParseIdentity(found[0])
	default:
		return Identity{}, fmt.Errorf("%w: %d concord:// URIs, want one", ErrNoIdentity, len(found))
	}
}
