package node

import (
	"net/http"

	"github.com/concordmap/concord/node/client/admin"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// handleFedLinks lists this system's federation links as this node sees
// them, from the same Manager.Status the admin ListLinks method serves,
// in the JSON `concord federation status --json` prints (admin.LinksJSON).
func (s *Server) handleFedLinks(w http.ResponseWriter, _ *http.Request) {
	res := &concordv1.ListLinksResponse{SystemId: s.cfg.SystemID, NodeId: s.cfg.NodeID}
	if s.fed != nil {
		res.Links, res.Gateways = s.fed.Status(), s.fed.Gateways()
	}
	writeJSON(w, http.StatusOK, admin.NewLinksJSON(res))
}
