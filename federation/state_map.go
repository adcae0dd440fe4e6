package federation

import (
	"fmt"
	"net/url"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Bounds on what a foreign MAP server may put into the replicated
// directory: more, or longer, is refused (the holder drops such entries
// before proposing; Apply refuses a command that still has them).
const (
	MaxForeignAgents   = 10000
	maxForeignIDBytes  = 256
	maxForeignStrBytes = 1024
	maxForeignTags     = 32

	// MaxForeignDirectoryBytes bounds the encoded agents of one foreign
	// directory, which the holder proposes as one Raft entry: past it,
	// further agents are dropped (and counted) before proposing. Without
	// it MaxForeignAgents entries of maximal size made an entry of ~370 MB.
	MaxForeignDirectoryBytes = 4 << 20
)

func isMapLink(l *concordv1.FedLink) bool {
	return l.GetKind() == concordv1.FedLinkKind_FED_LINK_KIND_MAP
}

// IsMapLink reports whether l links a foreign MAP server.
func IsMapLink(l *concordv1.FedLink) bool { return isMapLink(l) }

// validMapURL accepts ws:// and wss:// URLs with a host.
func validMapURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%w: map link url: %w", ErrInvalidCommand, err)
	}
	if (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return fmt.Errorf("%w: map link url must be ws:// or wss:// with a host", ErrInvalidCommand)
	}
	return nil
}

// validMapLink checks a link of kind map as FED_MAP_LINK_PUT stores it.
func validMapLink(l *concordv1.FedLink) error {
	switch {
	case !validSystemID(l.GetPeerSystemId()):
		return fmt.Errorf("%w: map link needs a valid system id", ErrInvalidCommand)
	case !isMapLink(l) || l.GetMap() == nil:
		return fmt.Errorf("%w: FED_MAP_LINK_PUT stores links of kind map only", ErrInvalidCommand)
	case len(l.GetPeerAddrs()) > 0 || len(l.GetPeerCaPem()) > 0 || l.GetTransitive():
		return fmt.Errorf("%w: a map link has no Concord peer addresses, CA or transitive routing", ErrInvalidCommand)
	}
	if err := validMapURL(l.GetMap().GetUrl()); err != nil {
		return err
	}
	switch a := l.GetMap().GetAuth(); a.GetMethod() {
	case "":
		if a.GetToken() != "" {
			return fmt.Errorf("%w: map link token without an auth method", ErrInvalidCommand)
		}
	case "bearer", "api-key":
		if a.GetToken() == "" {
			return fmt.Errorf("%w: map link auth %s needs a token", ErrInvalidCommand, a.GetMethod())
		}
	default:
		return fmt.Errorf("%w: map link auth method must be bearer or api-key", ErrInvalidCommand)
	}
	return nil
}

func (s *State) applyMapLinkPut(m *concordv1.FedMapLinkPut) error {
	l := m.GetLink()
	if err := validMapLink(l); err != nil {
		return err
	}
	if old, ok := s.links[l.GetPeerSystemId()]; ok && !isMapLink(old) {
		return fmt.Errorf("%w: %s is linked as a Concord system (unlink first)", ErrInvalidCommand, l.GetPeerSystemId())
	}
	l = proto.CloneOf(l)
	// A replaced link keeps its epoch sequence (stale holders stay fenced)
	// but no holder: the leader chooses again.
	l.Map.HolderNodeId = ""
	l.Map.HolderEpoch = s.links[l.GetPeerSystemId()].GetMap().GetHolderEpoch()
	l.Epoch = 0 // a Concord link's (FED_LINK_PUT sets it), not the proposer's
	s.links[l.GetPeerSystemId()] = l
	return nil
}

func (s *State) applyMapHolder(m *concordv1.FedMapHolder) error {
	l, ok := s.links[m.GetPeerSystemId()]
	switch {
	case !ok || !isMapLink(l):
		return fmt.Errorf("%w: no map link to %s", ErrNoLink, m.GetPeerSystemId())
	case m.GetPrevEpoch() != l.GetMap().GetHolderEpoch():
		return fmt.Errorf("%w: holder epoch is %d, not %d", ErrStaleHolder, l.GetMap().GetHolderEpoch(), m.GetPrevEpoch())
	}
	l.Map.HolderNodeId = m.GetNodeId()
	l.Map.HolderEpoch++
	return nil
}

func (s *State) applyMapDirectory(index uint64, m *concordv1.FedMapDirectory) error {
	peer := m.GetPeerSystemId()
	l, ok := s.links[peer]
	switch {
	case !ok || !isMapLink(l):
		return fmt.Errorf("%w: no map link to %s", ErrNoLink, peer)
	case m.GetHolderNodeId() != l.GetMap().GetHolderNodeId() || m.GetHolderEpoch() != l.GetMap().GetHolderEpoch():
		return fmt.Errorf("%w: %s (epoch %d) no longer holds the link to %s", ErrStaleHolder, m.GetHolderNodeId(), m.GetHolderEpoch(), peer)
	case len(m.GetAgents()) > MaxForeignAgents:
		return fmt.Errorf("%w: %d foreign agents (at most %d)", ErrInvalidCommand, len(m.GetAgents()), MaxForeignAgents)
	}
	next := &concordv1.FedImported{PeerSystemId: peer, Version: index}
	seen := map[string]bool{}
	for _, a := range m.GetAgents() {
		if err := ValidForeignAgent(a); err != nil {
			return err
		}
		if seen[a.GetId()] {
			return fmt.Errorf("%w: foreign agent %q twice", ErrInvalidCommand, a.GetId())
		}
		seen[a.GetId()] = true
		if Matches(l.GetImport(), agentView(a)) {
			next.Agents = append(next.Agents, proto.CloneOf(a))
		}
	}
	slices.SortFunc(next.Agents, func(a, b *concordv1.FedRemoteAgent) int { return cmpString(a.GetId(), b.GetId()) })
	s.imported[peer] = next
	return nil
}

// ValidForeignAgent checks one agent a foreign MAP server listed: an id
// usable in "<system>:agent:<id>" (no ':', 1..256 bytes of UTF-8) and
// bounded strings.
func ValidForeignAgent(a *concordv1.FedRemoteAgent) error {
	id := a.GetId()
	if id == "" || len(id) > maxForeignIDBytes || !utf8.ValidString(id) || containsRune(id, ':') {
		return fmt.Errorf("%w: foreign agent id %q is not addressable", ErrInvalidCommand, truncateID(id))
	}
	if len(a.GetTags()) > maxForeignTags {
		return fmt.Errorf("%w: foreign agent %s has too many tags", ErrInvalidCommand, id)
	}
	for _, s := range append([]string{a.GetName(), a.GetRole(), a.GetState(), a.GetDescription()}, a.GetTags()...) {
		if len(s) > maxForeignStrBytes || !utf8.ValidString(s) {
			return fmt.Errorf("%w: foreign agent %s has an oversized or invalid field", ErrInvalidCommand, id)
		}
	}
	return nil
}

func containsRune(s string, r rune) bool {
	for _, c := range s {
		if c == r {
			return true
		}
	}
	return false
}

func truncateID(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Redacted returns a copy of l without secrets (the map link's token),
// what admin answers carry.
func Redacted(l *concordv1.FedLink) *concordv1.FedLink {
	if l.GetMap().GetAuth().GetToken() == "" {
		return l
	}
	l = proto.CloneOf(l)
	l.Map.Auth.Token = ""
	return l
}

// RedactURL drops the userinfo and query of a map link URL for display.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(invalid url)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	return u.String()
}
