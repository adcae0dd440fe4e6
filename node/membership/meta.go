package membership

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Role is what a node does in its system. Only servers exist today; the type
// leaves room for non-voting roles later.
type Role string

// RoleServer marks a node that holds Raft state and may vote.
const RoleServer Role = "server"

// NodeMeta is what a node advertises about itself in gossip, besides its node
// id, system id and bootstrap-expect value (which come from Config). It is a
// plain value: copy it freely.
type NodeMeta struct {
	// HTTPAddr is the host:port of the node's HTTP listener (MAP WebSocket,
	// metrics, health). Optional.
	HTTPAddr string
	// GRPCAddr is the host:port of the node's gRPC listener, used by peers
	// to forward writes and deliver messages. Optional.
	GRPCAddr string
	// RaftAddr is the host:port of the node's Raft transport; required for
	// servers, because the Raft reconciler and bootstrap use it.
	RaftAddr string
	// Version is the node's build version (free text, at most 64 printable
	// ASCII characters).
	Version string
	// Role is the node's role; RoleServer is the only one.
	Role Role
	// RaftVoters is the node's target number of Raft voters (--raft-voters,
	// the same on every server); 0 when a peer runs an older version that
	// does not advertise it.
	RaftVoters int
	// FSMLevel is the newest replicated-state behaviour the node's FSM
	// enforces (registry.FSMLevel); 0 when a peer runs an older version
	// that does not advertise it.
	FSMLevel int
}

const (
	// metaFormatV1 is the first byte of the encoded meta; the protobuf body
	// (concordv1.GossipMeta) follows. Bump it only for a change an older
	// decoder must refuse; adding protobuf fields needs no bump.
	metaFormatV1 byte = 1

	maxIDLen           = 128
	maxVersionLen      = 64
	maxHostLen         = 253
	maxBootstrapExpect = 1 << 16
	maxRaftVoters      = 255
	maxFSMLevel        = 1 << 16
	bootIDLen          = 16 // hex of 8 random bytes
)

// wireMeta is everything a node's gossip meta carries.
type wireMeta struct {
	nodeID          string
	systemID        string
	meta            NodeMeta
	bootstrapExpect int
	leaving         bool
	bootstrapped    bool
	bootID          string
	draining        bool
}

// encodeMeta returns the version byte followed by the protobuf body.
// Marshal cannot fail for validated fields (it only rejects invalid UTF-8,
// which validation excludes), so a failure yields a body a peer will reject.
func encodeMeta(w wireMeta) []byte {
	pb := &concordv1.GossipMeta{
		NodeId:          w.nodeID,
		SystemId:        w.systemID,
		HttpAddr:        w.meta.HTTPAddr,
		GrpcAddr:        w.meta.GRPCAddr,
		RaftAddr:        w.meta.RaftAddr,
		Version:         w.meta.Version,
		BootstrapExpect: uint32(w.bootstrapExpect),
		Leaving:         w.leaving,
		Bootstrapped:    w.bootstrapped,
		BootId:          w.bootID,
		RaftVoters:      uint32(w.meta.RaftVoters),
		Draining:        w.draining,
		FsmLevel:        uint32(w.meta.FSMLevel),
	}
	if w.meta.Role == RoleServer {
		pb.Role = concordv1.GossipRole_GOSSIP_ROLE_SERVER
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(pb)
	if err != nil {
		return []byte{0}
	}
	return append([]byte{metaFormatV1}, body...)
}

// decodeMeta parses and validates a peer's meta. It is fed bytes from the
// network and must never panic; every failure wraps ErrInvalidMeta.
func decodeMeta(b []byte) (wireMeta, error) {
	switch {
	case len(b) == 0:
		return wireMeta{}, fmt.Errorf("%w: empty", ErrInvalidMeta)
	case len(b) > memberlist.MetaMaxSize:
		return wireMeta{}, fmt.Errorf("%w: %d bytes exceeds %d", ErrInvalidMeta, len(b), memberlist.MetaMaxSize)
	case b[0] != metaFormatV1:
		return wireMeta{}, fmt.Errorf("%w: %w: %d", ErrInvalidMeta, ErrMetaVersion, b[0])
	}
	var pb concordv1.GossipMeta
	if err := proto.Unmarshal(b[1:], &pb); err != nil {
		return wireMeta{}, fmt.Errorf("%w: %w", ErrInvalidMeta, err)
	}
	if pb.Role != concordv1.GossipRole_GOSSIP_ROLE_SERVER {
		return wireMeta{}, fmt.Errorf("%w: unknown role %d", ErrInvalidMeta, pb.Role)
	}
	if pb.RaftVoters > maxRaftVoters {
		return wireMeta{}, fmt.Errorf("%w: raft_voters %d too large", ErrInvalidMeta, pb.RaftVoters)
	}
	if pb.FsmLevel > maxFSMLevel {
		return wireMeta{}, fmt.Errorf("%w: fsm_level %d too large", ErrInvalidMeta, pb.FsmLevel)
	}
	if pb.BootstrapExpect > maxBootstrapExpect {
		return wireMeta{}, fmt.Errorf("%w: bootstrap_expect %d too large", ErrInvalidMeta, pb.BootstrapExpect)
	}
	w := wireMeta{
		nodeID:   pb.NodeId,
		systemID: pb.SystemId,
		meta: NodeMeta{
			HTTPAddr:   pb.HttpAddr,
			GRPCAddr:   pb.GrpcAddr,
			RaftAddr:   pb.RaftAddr,
			Version:    pb.Version,
			Role:       RoleServer,
			RaftVoters: int(pb.RaftVoters),
			FSMLevel:   int(pb.FsmLevel),
		},
		bootstrapExpect: int(pb.BootstrapExpect),
		leaving:         pb.Leaving,
		bootstrapped:    pb.Bootstrapped,
		bootID:          pb.BootId,
		draining:        pb.Draining,
	}
	if err := w.validate(); err != nil {
		return wireMeta{}, fmt.Errorf("%w: %w", ErrInvalidMeta, err)
	}
	return w, nil
}

func (w wireMeta) validate() error {
	if err := validateID(w.nodeID); err != nil {
		return fmt.Errorf("node id: %w", err)
	}
	if err := validateID(w.systemID); err != nil {
		return fmt.Errorf("system id: %w", err)
	}
	if w.bootID != "" {
		if err := validateID(w.bootID); err != nil || len(w.bootID) > bootIDLen {
			return fmt.Errorf("boot id %q: want up to %d bytes of [A-Za-z0-9._:-]", w.bootID, bootIDLen)
		}
	}
	return w.meta.validate()
}

func (m NodeMeta) validate() error {
	if m.Role != RoleServer {
		return fmt.Errorf("role %q unknown", m.Role)
	}
	if m.RaftAddr == "" {
		return errors.New("RaftAddr is required for a server")
	}
	for _, a := range []struct{ name, v string }{{"HTTPAddr", m.HTTPAddr}, {"GRPCAddr", m.GRPCAddr}, {"RaftAddr", m.RaftAddr}} {
		if a.v == "" {
			continue
		}
		if err := validateHostPort(a.v); err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
	}
	if m.RaftVoters < 0 || m.RaftVoters > maxRaftVoters {
		return fmt.Errorf("RaftVoters %d outside 0..%d", m.RaftVoters, maxRaftVoters)
	}
	if m.FSMLevel < 0 || m.FSMLevel > maxFSMLevel {
		return fmt.Errorf("FSMLevel %d outside 0..%d", m.FSMLevel, maxFSMLevel)
	}
	if len(m.Version) > maxVersionLen {
		return fmt.Errorf("Version longer than %d bytes", maxVersionLen)
	}
	for i := 0; i < len(m.Version); i++ {
		if c := m.Version[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("Version has a non-printable or space byte at %d", i)
		}
	}
	return nil
}

// validateID accepts 1..128 bytes of [A-Za-z0-9._:-]: safe in logs, file
// names, metric labels and Raft server ids.
func validateID(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > maxIDLen {
		return fmt.Errorf("longer than %d bytes", maxIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return fmt.Errorf("byte %q at %d not in [A-Za-z0-9._:-]", c, i)
		}
	}
	return nil
}

// validateHostPort accepts "host:port" with a non-empty host (an advertised
// address must be dialable, so ":7700" is refused) and a port in 1..65535.
func validateHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if host == "" || len(host) > maxHostLen {
		return fmt.Errorf("%q: host empty or too long", s)
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%q: host has a non-printable byte", s)
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port must be 1..65535", s)
	}
	return nil
}

// newBootID returns bootIDLen hex characters from crypto/rand.
func newBootID() string {
	var b [bootIDLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
