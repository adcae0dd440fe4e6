package admin

import (
	"context"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// NodeKeyring is one node's gossip keyring, or the error that node gave.
type NodeKeyring struct {
	NodeID string
	Keys   []KeyringKey
	Error  string
}

// KeyringKey is an installed gossip key, named by fingerprint.
type KeyringKey struct {
	Fingerprint string
	Primary     bool
}

// NodeResult is one node's answer to a keyring change ("" Error: done).
type NodeResult struct {
	NodeID, Error string
}

// KeyringList lists every node's installed keys.
func (c *Client) KeyringList(ctx context.Context) ([]NodeKeyring, error) {
	res, err := c.admin.KeyringList(ctx, &concordv1.KeyringListRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]NodeKeyring, 0, len(res.GetNodes()))
	for _, n := range res.GetNodes() {
		nk := NodeKeyring{NodeID: n.GetNodeId(), Error: n.GetError()}
		for _, k := range n.GetKeys() {
			nk.Keys = append(nk.Keys, KeyringKey{Fingerprint: k.GetFingerprint(), Primary: k.GetPrimary()})
		}
		out = append(out, nk)
	}
	return out, nil
}

// KeyringInstall installs key on every node.
func (c *Client) KeyringInstall(ctx context.Context, key []byte) ([]NodeResult, error) {
	res, err := c.admin.KeyringInstall(ctx, &concordv1.KeyringInstallRequest{Key: key})
	return nodeResults(res.GetNodes(), err)
}

// KeyringUse makes the installed key with fingerprint the primary on every node.
func (c *Client) KeyringUse(ctx context.Context, fingerprint string) ([]NodeResult, error) {
	res, err := c.admin.KeyringUse(ctx, &concordv1.KeyringUseRequest{Fingerprint: fingerprint})
	return nodeResults(res.GetNodes(), err)
}

// KeyringRemove removes the key with fingerprint from every node.
func (c *Client) KeyringRemove(ctx context.Context, fingerprint string) ([]NodeResult, error) {
	res, err := c.admin.KeyringRemove(ctx, &concordv1.KeyringRemoveRequest{Fingerprint: fingerprint})
	return nodeResults(res.GetNodes(), err)
}

func nodeResults(nodes []*concordv1.KeyringNodeResult, err error) ([]NodeResult, error) {
	if err != nil {
		return nil, err
	}
	out := make([]NodeResult, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, NodeResult{NodeID: n.GetNodeId(), Error: n.GetError()})
	}
	return out, nil
}
