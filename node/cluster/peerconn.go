package cluster

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PeerConn returns a connection to another node of this system's gRPC
// port (the pool's, with the node-to-node credentials): federation uses it
// to hand messages for a map link to the node holding it.
func (s *Server) PeerConn(nodeID string) (grpc.ClientConnInterface, error) {
	if s.deps.Resolver == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "cannot reach node %s: no address resolver", nodeID)
	}
	addr, ok := s.deps.Resolver.GRPCAddr(nodeID)
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "node %s has no known gRPC address", nodeID)
	}
	conn, err := s.pool.get(nodeID, addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return conn, nil
}
