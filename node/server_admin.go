package node

// GRPCAddr returns the bound gRPC address (host:port) of the node-to-node
// and admin API (`concord snapshot`, `members`, ...); "" if it has no
// listener.
func (s *Server) GRPCAddr() string {
	if s.grpcLn == nil {
		return ""
	}
	return s.grpcLn.Addr().String()
}
