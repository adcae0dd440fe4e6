package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/membership"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// adminService implements concordv1.AdminServer: gossip key rotation
// across the system. A request from the CLI is applied here and fanned out
// to every other alive member over its gRPC port (local_only set, admin
// marker and operator authorization passed on); each member persists its
// own ring. Members gossip sees dead are listed as not reached: they miss
// the change and must be given the current key when they return (README,
// "Rotating the gossip key"). Changes are idempotent (installing a key
// twice, removing an absent one), so an operator re-runs a step that did
// not reach everyone.
type adminService struct {
	concordv1.UnimplementedAdminServer
	s *Server
}

// KeyringList reports every alive member's keys by fingerprint.
func (a *adminService) KeyringList(ctx context.Context, req *concordv1.KeyringListRequest) (*concordv1.KeyringListResponse, error) {
	if req.GetLocalOnly() {
		kr, err := a.keyring()
		if err != nil {
			return nil, err
		}
		return &concordv1.KeyringListResponse{Nodes: []*concordv1.NodeKeyring{localKeys(a.s.cfg.NodeID, kr)}}, nil
	}
	resp := &concordv1.KeyringListResponse{}
	var mu sync.Mutex
	a.fanOut(ctx, func(ctx context.Context, id string, c concordv1.AdminClient) error {
		var nk *concordv1.NodeKeyring
		if c == nil {
			kr, err := a.keyring()
			if err != nil {
				return err
			}
			nk = localKeys(id, kr)
		} else {
			r, err := c.KeyringList(ctx, &concordv1.KeyringListRequest{LocalOnly: true})
			if err != nil {
				return err
			}
			if len(r.GetNodes()) != 1 {
				return fmt.Errorf("answered for %d nodes, want 1", len(r.GetNodes()))
			}
			nk = r.GetNodes()[0]
		}
		mu.Lock()
		resp.Nodes = append(resp.Nodes, nk)
		mu.Unlock()
		return nil
	}, func(id string, err error) {
		mu.Lock()
		resp.Nodes = append(resp.Nodes, &concordv1.NodeKeyring{NodeId: id, Error: err.Error()})
		mu.Unlock()
	})
	slices.SortFunc(resp.Nodes, func(x, y *concordv1.NodeKeyring) int { return strings.Compare(x.GetNodeId(), y.GetNodeId()) })
	return resp, nil
}

func localKeys(id string, kr Keyring) *concordv1.NodeKeyring {
	nk := &concordv1.NodeKeyring{NodeId: id}
	for i, k := range kr.Keys() {
		nk.Keys = append(nk.Keys, &concordv1.KeyringKey{Fingerprint: membership.KeyFingerprint(k), Primary: i == 0})
	}
	return nk
}

// KeyringInstall installs a key on every alive member.
func (a *adminService) KeyringInstall(ctx context.Context, req *concordv1.KeyringInstallRequest) (*concordv1.KeyringInstallResponse, error) {
	key := req.GetKey()
	local := func() error {
		kr, err := a.keyring()
		if err != nil {
			return err
		}
		return keyringStatus(kr.InstallKey(key))
	}
	remote := func(ctx context.Context, c concordv1.AdminClient) error {
		_, err := c.KeyringInstall(ctx, &concordv1.KeyringInstallRequest{Key: key, LocalOnly: true})
		return err
	}
	nodes, err := a.change(ctx, req.GetLocalOnly(), local, remote)
	return &concordv1.KeyringInstallResponse{Nodes: nodes}, err
}

// KeyringUse makes the key with the given fingerprint primary everywhere.
func (a *adminService) KeyringUse(ctx context.Context, req *concordv1.KeyringUseRequest) (*concordv1.KeyringUseResponse, error) {
	fp := req.GetFingerprint()
	local := func() error {
		kr, key, err := a.keyByFingerprint(fp)
		if err != nil {
			return err
		}
		return keyringStatus(kr.UseKey(key))
	}
	remote := func(ctx context.Context, c concordv1.AdminClient) error {
		_, err := c.KeyringUse(ctx, &concordv1.KeyringUseRequest{Fingerprint: fp, LocalOnly: true})
		return err
	}
	nodes, err := a.change(ctx, req.GetLocalOnly(), local, remote)
	return &concordv1.KeyringUseResponse{Nodes: nodes}, err
}

// KeyringRemove removes the key with the given fingerprint everywhere.
// A member that no longer has it counts as done.
func (a *adminService) KeyringRemove(ctx context.Context, req *concordv1.KeyringRemoveRequest) (*concordv1.KeyringRemoveResponse, error) {
	fp := req.GetFingerprint()
	local := func() error {
		kr, key, err := a.keyByFingerprint(fp)
		if status.Code(err) == codes.NotFound {
			return nil // already gone: removal is idempotent
		}
		if err != nil {
			return err
		}
		return keyringStatus(kr.RemoveKey(key))
	}
	remote := func(ctx context.Context, c concordv1.AdminClient) error {
		_, err := c.KeyringRemove(ctx, &concordv1.KeyringRemoveRequest{Fingerprint: fp, LocalOnly: true})
		return err
	}
	nodes, err := a.change(ctx, req.GetLocalOnly(), local, remote)
	return &concordv1.KeyringRemoveResponse{Nodes: nodes}, err
}

// change runs one keyring change here only (localOnly: a fan-out hop,
// whose error is the RPC's) or on every member, returning each one's
// outcome sorted by node id.
func (a *adminService) change(ctx context.Context, localOnly bool, local func() error,
	remote func(context.Context, concordv1.AdminClient) error) ([]*concordv1.KeyringNodeResult, error) {
	if localOnly {
		if err := local(); err != nil {
			return nil, err
		}
		return []*concordv1.KeyringNodeResult{{NodeId: a.s.cfg.NodeID}}, nil
	}
	var mu sync.Mutex
	var out []*concordv1.KeyringNodeResult
	add := func(id string, err error) {
		r := &concordv1.KeyringNodeResult{NodeId: id}
		if err != nil {
			r.Error = err.Error()
		}
		mu.Lock()
		out = append(out, r)
		mu.Unlock()
	}
	a.fanOut(ctx, func(ctx context.Context, id string, c concordv1.AdminClient) error {
		var err error
		if c == nil {
			err = local()
		} else {
			err = remote(ctx, c)
		}
		if err == nil {
			add(id, nil)
		}
		return err
	}, add)
	slices.SortFunc(out, func(x, y *concordv1.KeyringNodeResult) int { return strings.Compare(x.GetNodeId(), y.GetNodeId()) })
	return out, nil
}

// fanOut calls each member concurrently: do with a nil client for this
// node, with an Admin client for an alive peer; failed gets every error,
// and "not reached" for members gossip sees dead. It returns when every
// call has returned (each bounded by ctx).
func (a *adminService) fanOut(ctx context.Context, do func(context.Context, string, concordv1.AdminClient) error, failed func(string, error)) {
	var wg sync.WaitGroup
	call := func(id string, f func() error) {
		wg.Add(1)
		go func() { // ends when f returns: every call is bounded by ctx
			defer wg.Done()
			if err := f(); err != nil {
				failed(id, err)
			}
		}()
	}
	self := a.s.cfg.NodeID
	call(self, func() error { return do(ctx, self, nil) })
	if a.s.deps.Members == nil {
		wg.Wait()
		return
	}
	out := passOnAdmin(ctx)
	for _, m := range a.s.deps.Members.Members() {
		switch {
		case m.ID == self:
		case m.Status == membership.StatusLeft:
		case m.Status != membership.StatusAlive:
			failed(m.ID, fmt.Errorf("not reached: gossip sees it %s; give it the current key before it returns", m.Status))
		case m.GRPCAddr == "":
			failed(m.ID, errors.New("not reached: no gRPC address in gossip"))
		default:
			call(m.ID, func() error {
				cc, err := a.s.pool.get(m.ID, m.GRPCAddr)
				if err != nil {
					return fmt.Errorf("connect: %w", err)
				}
				return do(out, m.ID, concordv1.NewAdminClient(cc))
			})
		}
	}
	wg.Wait()
}

// keyring returns the node's keyring, or FAILED_PRECONDITION when gossip
// runs in plaintext (or this server has none).
func (a *adminService) keyring() (Keyring, error) {
	if a.s.deps.Keyring == nil || len(a.s.deps.Keyring.Keys()) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "gossip is not encrypted on this node: there is no keyring to change")
	}
	return a.s.deps.Keyring, nil
}

// keyByFingerprint finds an installed key; NOT_FOUND when none matches.
func (a *adminService) keyByFingerprint(fp string) (Keyring, []byte, error) {
	kr, err := a.keyring()
	if err != nil {
		return nil, nil, err
	}
	if fp == "" {
		return nil, nil, status.Error(codes.InvalidArgument, "fingerprint is required (see concord keyring list)")
	}
	var found []byte
	for _, k := range kr.Keys() {
		if membership.KeyFingerprint(k) == fp {
			if found != nil && !bytes.Equal(found, k) {
				return nil, nil, status.Errorf(codes.FailedPrecondition, "two installed keys share fingerprint %s", fp)
			}
			found = k
		}
	}
	if found == nil {
		return nil, nil, status.Errorf(codes.NotFound, "no installed key has fingerprint %s (install it first: concord keyring install)", fp)
	}
	return kr, found, nil
}

// keyringStatus maps a membership keyring error onto a gRPC status.
func keyringStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, membership.ErrNoKeyring):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, membership.ErrKeyring):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
