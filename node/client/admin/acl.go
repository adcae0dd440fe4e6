package admin

import (
	"context"
	"time"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// KeySpec describes an API key to create.
type KeySpec struct {
	Participant  string   // participant id pattern: an id, "prefix*" or "*"
	Types        []string // participant types allowed
	Capabilities []string // empty: the type's defaults
	Description  string
	TTL          time.Duration // 0: never expires; whole seconds
	// GatewaySources and GatewayTargets: the systems a gateway connected
	// with the key may route for and to (system ids or "*").
	GatewaySources, GatewayTargets []string
}

// APIKey is a stored API key (never its secret).
type APIKey struct {
	ID, Participant string
	Types           []string
	Capabilities    []string
	Description     string
	Created         time.Time
	Expires         time.Time // zero: never
	// GatewaySources and GatewayTargets: what a gateway with the key may
	// route for and to.
	GatewaySources, GatewayTargets []string
}

// CreateAPIKey creates an API key and returns it with its secret, which is
// shown only this once.
func (c *Client) CreateAPIKey(ctx context.Context, s KeySpec) (APIKey, string, error) {
	res, err := c.acl.CreateToken(ctx, &concordv1.AclCreateTokenRequest{ParticipantIdPattern: s.Participant,
		ParticipantTypes: s.Types, Capabilities: s.Capabilities, Description: s.Description,
		TtlSeconds: int64(s.TTL / time.Second), GatewaySources: s.GatewaySources, GatewayTargets: s.GatewayTargets})
	if err != nil {
		return APIKey{}, "", err
	}
	return apiKey(res.GetKey()), res.GetToken(), nil
}

// ListAPIKeys lists the API keys.
func (c *Client) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	res, err := c.acl.ListTokens(ctx, &concordv1.AclListTokensRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]APIKey, 0, len(res.GetKeys()))
	for _, k := range res.GetKeys() {
		out = append(out, apiKey(k))
	}
	return out, nil
}

// RevokeAPIKey revokes the API key id.
func (c *Client) RevokeAPIKey(ctx context.Context, id string) error {
	_, err := c.acl.RevokeToken(ctx, &concordv1.AclRevokeTokenRequest{Id: id})
	return err
}

func apiKey(k *concordv1.ApiKey) APIKey {
	out := APIKey{ID: k.GetId(), Participant: k.GetParticipantIdPattern(), Types: k.GetParticipantTypes(),
		Capabilities: k.GetCapabilities(), Description: k.GetDescription(), Created: time.UnixMilli(k.GetCreatedMs()).UTC(),
		GatewaySources: k.GetGatewaySources(), GatewayTargets: k.GetGatewayTargets()}
	if k.GetExpiresMs() > 0 {
		out.Expires = time.UnixMilli(k.GetExpiresMs()).UTC()
	}
	return out
}
