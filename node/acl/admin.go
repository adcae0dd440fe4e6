package acl

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// AdminMethodPrefix starts the full gRPC name of every AclAdmin method:
// all of them are admin methods (operator credential only).
const AdminMethodPrefix = "/concord.v1.AclAdmin/"

// Proposer proposes one Raft command from any node (the store forwards
// to the leader).
type Proposer interface {
	Apply(ctx context.Context, t concordv1.CommandType, m proto.Message) (any, uint64, error)
}

// AdminService implements concordv1.AclAdminServer: the operator API
// behind `concord acl token create|list|revoke`.
type AdminService struct {
	concordv1.UnimplementedAclAdminServer
	keys        *Module
	store       Proposer
	waitApplied func(ctx context.Context, index uint64) error
	now         func() time.Time
}

// NewAdminService serves keys; waitApplied (optional) makes a write
// visible to this node's next List before it returns.
func NewAdminService(keys *Module, store Proposer, waitApplied func(context.Context, uint64) error) *AdminService {
	return &AdminService{keys: keys, store: store, waitApplied: waitApplied, now: time.Now}
}

// Register adds the service to a gRPC server.
func (s *AdminService) Register(g *grpc.Server) { concordv1.RegisterAclAdminServer(g, s) }

// CreateToken implements concordv1.AclAdminServer.
func (s *AdminService) CreateToken(ctx context.Context, req *concordv1.AclCreateTokenRequest) (*concordv1.AclCreateTokenResponse, error) {
	id, token, hash := NewKey()
	now := s.now()
	k := &concordv1.ApiKey{
		Id: id, SecretSha256: hash, ParticipantIdPattern: req.GetParticipantIdPattern(),
		ParticipantTypes: req.GetParticipantTypes(), Capabilities: req.GetCapabilities(),
		Description: req.GetDescription(), CreatedMs: now.UnixMilli(),
		GatewaySources: req.GetGatewaySources(), GatewayTargets: req.GetGatewayTargets(),
	}
	if req.GetTtlSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "ttl_seconds must be >= 0")
	}
	if ttl := req.GetTtlSeconds(); ttl > 0 {
		k.ExpiresMs = now.Add(time.Duration(ttl) * time.Second).UnixMilli()
	}
	if err := ValidateKey(k); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.apply(ctx, concordv1.CommandType_COMMAND_TYPE_ACL_KEY_CREATE, &concordv1.AclKeyCreate{Key: k}); err != nil {
		return nil, err
	}
	out := proto.CloneOf(k)
	out.SecretSha256 = nil
	return &concordv1.AclCreateTokenResponse{Key: out, Token: token}, nil
}

// ListTokens implements concordv1.AclAdminServer (hashes left out).
func (s *AdminService) ListTokens(context.Context, *concordv1.AclListTokensRequest) (*concordv1.AclListTokensResponse, error) {
	out := &concordv1.AclListTokensResponse{}
	for _, k := range s.keys.Keys() {
		c := proto.CloneOf(k)
		c.SecretSha256 = nil
		out.Keys = append(out.Keys, c)
	}
	return out, nil
}

// RevokeToken implements concordv1.AclAdminServer.
func (s *AdminService) RevokeToken(ctx context.Context, req *concordv1.AclRevokeTokenRequest) (*concordv1.AclRevokeTokenResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is required")
	}
	if _, ok := s.keys.Key(req.GetId()); !ok {
		return nil, status.Error(codes.NotFound, "no such API key")
	}
	if err := s.apply(ctx, concordv1.CommandType_COMMAND_TYPE_ACL_KEY_REVOKE, &concordv1.AclKeyRevoke{Id: req.GetId()}); err != nil {
		return nil, err
	}
	return &concordv1.AclRevokeTokenResponse{}, nil
}

func (s *AdminService) apply(ctx context.Context, t concordv1.CommandType, m proto.Message) error {
	_, idx, err := s.store.Apply(ctx, t, m)
	switch {
	case errors.Is(err, ErrKeyNotFound):
		return status.Error(codes.NotFound, "no such API key")
	case errors.Is(err, ErrKeyExists), errors.Is(err, ErrInvalidKey):
		return status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return status.Errorf(codes.Unavailable, "propose %s: %v", t, err)
	}
	if s.waitApplied != nil {
		if err := s.waitApplied(ctx, idx); err != nil {
			return status.Errorf(codes.Unavailable, "wait for apply: %v", err)
		}
	}
	return nil
}
