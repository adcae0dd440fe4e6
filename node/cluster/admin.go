package cluster

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// AdminMetadataKey is the gRPC metadata key that marks a call as an
// operator's admin action. The CLI sets it on every admin call; a follower
// passing an admin request on to the leader keeps it (with the operator's
// authorization metadata). The marker is not a credential: it tells the
// server, and the authorization interceptor in front of it, that the call
// must carry an operator credential. A RemovePeer with force without it is
// refused, so forcing a removal is never implicit in node-to-node traffic.
const AdminMetadataKey = "concord-admin"

// authorizationMetadataKey carries an operator token (TRUST.md); a
// follower passing an admin request to the leader forwards it.
const authorizationMetadataKey = "authorization"

// adminMethods are the Cluster service's methods only an operator may
// call; every method of the Admin service is one too.
var adminMethods = map[string]bool{
	concordv1.Cluster_RemovePeer_FullMethodName:  true,
	concordv1.Operator_Drain_FullMethodName:      true,
	concordv1.Operator_AdmitDrain_FullMethodName: true,
}

// IsAdminMethod reports whether fullMethod (as grpc.UnaryServerInfo names
// it) is an admin method that needs an operator credential: every method
// of the Admin service (keyring) and of the Snapshots service (backups),
// and Cluster's RemovePeer and Operator's Drain. Read-only
// introspection (Members, RaftPeers, Status) is not in the list: peers
// call Status, and what needs which credential is the interceptor's rule.
func IsAdminMethod(fullMethod string) bool {
	return adminMethods[fullMethod] || strings.HasPrefix(fullMethod, "/"+concordv1.Admin_ServiceDesc.ServiceName+"/") ||
		strings.HasPrefix(fullMethod, "/"+concordv1.Snapshots_ServiceDesc.ServiceName+"/")
}

// WithAdminMarker returns ctx with the admin marker in its outgoing
// metadata. Clients (the CLI) call admin methods with it.
func WithAdminMarker(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, AdminMetadataKey, "1")
}

// hasAdminMarker reports whether an incoming call carries the marker.
func hasAdminMarker(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(AdminMetadataKey)) > 0
}

// passOnAdmin returns an outgoing context for passing an admin request on
// to another node: the marker and the caller's authorization metadata go
// with it (unless an interceptor already put it there), so the next node
// checks the same operator credential.
func passOnAdmin(ctx context.Context) context.Context {
	out := ctx
	if outMD, _ := metadata.FromOutgoingContext(ctx); len(outMD.Get(AdminMetadataKey)) == 0 {
		out = WithAdminMarker(ctx)
	}
	if outMD, _ := metadata.FromOutgoingContext(out); len(outMD.Get(authorizationMetadataKey)) > 0 {
		return out
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(authorizationMetadataKey) {
		out = metadata.AppendToOutgoingContext(out, authorizationMetadataKey, v)
	}
	return out
}
