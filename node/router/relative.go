package router

import (
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// resolveRelative resolves the hierarchy forms relative to the sending
// agent: parent, children, ancestors, descendants (depth limits the number
// of levels; 0 = all), siblings (agents sharing the sender's parent).
func (r *Router) resolveRelative(from Sender, a address) (resolution, error) {
	if from.AgentID == "" {
		return resolution{}, rpc.NewError(rpc.CodeAddressNotFound, "Relative address needs a sending agent").
			WithDetails(map[string]any{"reason": "sender_not_agent"})
	}
	self, ok := r.reg.Agent(from.AgentID)
	if !ok {
		return resolution{}, rpc.NewError(rpc.CodeAddressNotFound, "Sending agent is not registered: "+from.AgentID).
			WithDetails(map[string]any{"reason": "sender_not_agent", "agentId": from.AgentID})
	}
	var out []recipient
	switch a.kind {
	case addrParent:
		out = r.ancestors(&self, 1)
	case addrAncestors:
		out = r.ancestors(&self, a.depth)
	case addrChildren:
		out = agentRecipients(r.reg.Children(self.ID))
	case addrDescendants:
		out = r.descendants(self.ID, a.depth)
	case addrSiblings:
		if self.Parent != "" {
			sibs := r.reg.Children(self.Parent)
			for i := range sibs {
				if sibs[i].ID != self.ID {
					out = append(out, agentRecipient(&sibs[i]))
				}
			}
		}
	}
	return group(out, "")
}

// ancestors walks up the parent chain, at most depth levels (0 = to the
// root). A parent id that is not registered ends the walk; a cycle (which
// the registry should never allow) is cut.
func (r *Router) ancestors(self *registry.Agent, depth int) []recipient {
	var out []recipient
	seen := map[string]bool{self.ID: true}
	for p := self.Parent; p != "" && !seen[p] && (depth == 0 || len(out) < depth); {
		seen[p] = true
		a, ok := r.reg.Agent(p)
		if !ok {
			break
		}
		out = append(out, agentRecipient(&a))
		p = a.Parent
	}
	return out
}

// descendants collects the subtree below id breadth first, at most depth
// levels (0 = all).
func (r *Router) descendants(id string, depth int) []recipient {
	var out []recipient
	seen := map[string]bool{id: true}
	level := []string{id}
	for d := 1; len(level) > 0 && (depth == 0 || d <= depth); d++ {
		var next []string
		for _, p := range level {
			for _, c := range r.reg.Children(p) {
				if seen[c.ID] {
					continue
				}
				seen[c.ID] = true
				out = append(out, agentRecipient(&c))
				next = append(next, c.ID)
			}
		}
		level = next
	}
	return out
}
