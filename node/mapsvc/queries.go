package mapsvc

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
)

// agentsGet serves map/agents/get {agentId, include?}.
func (s *Service) agentsGet(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	id := p.reqStr("agentId")
	inc := p.sub("include")
	flags := map[string]bool{}
	for _, k := range []string{"parent", "children", "siblings", "ancestors", "descendants"} {
		flags[k], _ = inc.boolean(k)
	}
	maxDepth, ok := inc.integer("maxDepth")
	if ok && maxDepth < 1 {
		inc.fail("maxDepth", "must be >= 1")
	}
	if !ok {
		maxDepth = 64
	}
	p.merge(inc)
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	a, found := s.reg.Agent(id)
	if !found || !s.agentVisible(cs, &a) {
		return nil, rpc.NewError(rpc.CodeAgentNotFound, "Agent not found: "+id)
	}
	out := map[string]any{"agent": a}
	if flags["parent"] && a.Parent != "" {
		if par, ok := s.reg.Agent(a.Parent); ok && s.agentVisible(cs, &par) {
			out["parent"] = par
		}
	}
	if flags["children"] {
		out["children"] = s.visibleAgents(cs, s.reg.Children(a.ID))
	}
	if flags["siblings"] {
		var sib []registry.Agent
		if a.Parent != "" {
			for _, c := range s.reg.Children(a.Parent) {
				if c.ID != a.ID {
					sib = append(sib, c)
				}
			}
		}
		out["siblings"] = s.visibleAgents(cs, sib)
	}
	if flags["ancestors"] {
		var anc []registry.Agent
		cur := a
		for d := int64(0); d < maxDepth && cur.Parent != ""; d++ {
			par, ok := s.reg.Agent(cur.Parent)
			if !ok || slices.ContainsFunc(anc, func(x registry.Agent) bool { return x.ID == par.ID }) {
				break
			}
			anc = append(anc, par)
			cur = par
		}
		out["ancestors"] = s.visibleAgents(cs, anc)
	}
	if flags["descendants"] {
		out["descendants"] = s.visibleAgents(cs, s.descendants(a.ID, int(maxDepth)))
	}
	return out, nil
}

// descendants walks the parent links breadth-first up to depth levels.
func (s *Service) descendants(root string, depth int) []registry.Agent {
	byParent := map[string][]registry.Agent{}
	for _, a := range s.reg.Agents() {
		if a.Parent != "" {
			byParent[a.Parent] = append(byParent[a.Parent], a)
		}
	}
	var out []registry.Agent
	seen := map[string]bool{root: true}
	level := []string{root}
	for d := 0; d < depth && len(level) > 0; d++ {
		var next []string
		for _, id := range level {
			for _, c := range byParent[id] {
				if !seen[c.ID] {
					seen[c.ID] = true
					out = append(out, c)
					next = append(next, c.ID)
				}
			}
		}
		level = next
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// agentFilter is map/agents/list's filter (schema ∪ SDK).
type agentFilter struct {
	states, roles, scopes, tags []string
	parent, ownerID             string
	hasParent, hasOwner         bool
	hasChildren                 *bool
	capabilityID, accepts, pid  string
	// systems (filter.systems) and federated (include.federated) ask for
	// agents of linked systems too.
	systems   []string
	federated bool
}

func decodeAgentFilter(p *params) agentFilter {
	fp := p.sub("filter")
	var f agentFilter
	f.states, f.roles, f.scopes, f.tags = fp.strs("states"), fp.strs("roles"), fp.strs("scopes"), fp.strs("tags")
	f.parent, f.hasParent = fp.optStr("parent")
	f.ownerID, f.hasOwner = fp.optStr("ownerId")
	if v, ok := fp.boolean("hasChildren"); ok {
		f.hasChildren = &v
	}
	f.capabilityID, f.accepts, f.pid = fp.str("capabilityId"), fp.str("accepts"), fp.str("persistentId")
	f.systems = fp.strs("systems")
	p.merge(fp)
	ip := p.sub("include")
	f.federated, _ = ip.boolean("federated")
	p.merge(ip)
	return f
}

// candidates returns the agents map/agents/list filters, sorted by id:
// this system's, plus the imported remote ones when the filter asks for
// federated agents (filter.systems naming a linked system, or
// include.federated).
func (s *Service) candidates(f *agentFilter) []registry.Agent {
	local := len(f.systems) == 0 || slices.Contains(f.systems, s.cfg.SystemID)
	var remote []string
	for _, sys := range f.systems {
		if sys != s.cfg.SystemID {
			remote = append(remote, sys)
		}
	}
	var out []registry.Agent
	if local {
		out = s.reg.Agents()
	}
	switch {
	case s.cfg.RemoteAgents == nil:
		return out
	case len(f.systems) > 0 && len(remote) == 0: // only this system named
		return out
	case len(f.systems) == 0 && !f.federated: // remote agents only when asked
		return out
	}
	out = append(out, s.cfg.RemoteAgents(remote)...)
	slices.SortFunc(out, func(a, b registry.Agent) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// descriptor is the part of capabilityDescriptor the filter reads.
type descriptor struct {
	Capabilities []struct {
		ID string `json:"id"`
	} `json:"capabilities"`
	Tags    []string `json:"tags"`
	Accepts []struct {
		ContentType string `json:"contentType"`
	} `json:"accepts"`
}

func (f *agentFilter) match(a *registry.Agent, hasChildren map[string]bool) bool {
	if len(f.states) > 0 && !slices.Contains(f.states, a.State) ||
		len(f.roles) > 0 && !slices.Contains(f.roles, a.Role) ||
		f.hasParent && a.Parent != f.parent ||
		f.hasOwner && a.OwnerID != f.ownerID ||
		f.hasChildren != nil && hasChildren[a.ID] != *f.hasChildren {
		return false
	}
	if len(f.scopes) > 0 && !slices.ContainsFunc(f.scopes, func(s string) bool { return slices.Contains(a.Scopes, s) }) {
		return false
	}
	if f.pid != "" {
		var pi struct {
			PersistentID string `json:"persistentId"`
		}
		if json.Unmarshal(a.PersistentIdentity, &pi) != nil || pi.PersistentID != f.pid {
			return false
		}
	}
	if f.capabilityID == "" && f.accepts == "" && len(f.tags) == 0 {
		return true
	}
	var d descriptor
	if json.Unmarshal(a.CapabilityDescriptor, &d) != nil {
		return false
	}
	if f.capabilityID != "" && !slices.ContainsFunc(d.Capabilities, func(c struct {
		ID string `json:"id"`
	}) bool {
		return c.ID == f.capabilityID
	}) {
		return false
	}
	if f.accepts != "" && !slices.ContainsFunc(d.Accepts, func(c struct {
		ContentType string `json:"contentType"`
	}) bool {
		return c.ContentType == f.accepts
	}) {
		return false
	}
	return len(f.tags) == 0 || slices.ContainsFunc(f.tags, func(t string) bool { return slices.Contains(d.Tags, t) })
}

// page reads limit/cursor: the cursor is the last id of the previous page
// (ids are listed in ascending order).
func (s *Service) page(p *params) (limit int, cursor string) {
	limit = s.cfg.MaxPageSize
	if n, ok := p.integer("limit"); ok {
		if n < 1 {
			p.fail("limit", "must be >= 1")
		}
		limit = int(min(n, int64(s.cfg.MaxPageSize)))
	}
	return limit, p.str("cursor")
}

// paginate cuts sorted ids after cursor into one page.
func paginate[T any](items []T, id func(*T) string, limit int, cursor string) ([]T, string) {
	start := sort.Search(len(items), func(i int) bool { return id(&items[i]) > cursor })
	items = items[start:]
	if len(items) <= limit {
		return nonNil(items), ""
	}
	return items[:limit], id(&items[limit-1])
}

// agentsList serves map/agents/list {filter?, limit?, cursor?}.
func (s *Service) agentsList(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	f := decodeAgentFilter(p)
	limit, cursor := s.page(p)
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	all := s.candidates(&f)
	hasChildren := map[string]bool{}
	if f.hasChildren != nil {
		for i := range all {
			hasChildren[all[i].Parent] = true
		}
	}
	var matched []registry.Agent
	for i := range all {
		if f.match(&all[i], hasChildren) && s.agentVisible(cs, &all[i]) {
			matched = append(matched, all[i])
		}
	}
	agents, next := paginate(matched, func(a *registry.Agent) string { return a.ID }, limit, cursor)
	out := map[string]any{"agents": agents}
	if next != "" {
		out["nextCursor"] = next
	}
	return out, nil
}

type edge struct {
	From string `json:"from"`
	To   string `json:"to"`
	Type string `json:"type"`
}

// structureGraph serves map/structure/graph {rootAgentId?, depth?,
// includeRelationships?}: nodes and parent-child edges (plus peer,
// supervisor and collaborator edges from relationships). Edges to agents
// outside the node set are dropped.
func (s *Service) structureGraph(ctx context.Context, _ *rpc.Conn, cs *connState, raw json.RawMessage) (any, error) {
	p := decodeParams(raw)
	root := p.str("rootAgentId")
	depth, hasDepth := p.integer("depth")
	if hasDepth && depth < 1 {
		p.fail("depth", "must be >= 1")
	}
	rel, ok := p.boolean("includeRelationships")
	if !ok {
		rel = true
	}
	if err := s.readBarrier(ctx, p); err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	if !hasDepth {
		depth = 1 << 20
	}
	var nodes []registry.Agent
	if root != "" {
		r, ok := s.reg.Agent(root)
		if !ok || !s.agentVisible(cs, &r) {
			return nil, rpc.NewError(rpc.CodeAgentNotFound, "Agent not found: "+root)
		}
		nodes = append([]registry.Agent{r}, s.descendants(root, int(depth))...)
	} else if hasDepth {
		for _, r := range s.reg.AgentsWhere(func(a *registry.Agent) bool { return a.Parent == "" }) {
			nodes = append(nodes, r)
			nodes = append(nodes, s.descendants(r.ID, int(depth)-1)...)
		}
	} else {
		nodes = s.reg.Agents()
	}
	nodes = s.visibleAgents(cs, nodes) // edges to hidden agents go with them
	in := map[string]bool{}
	for _, n := range nodes {
		in[n.ID] = true
	}
	edges := []edge{}
	for _, n := range nodes {
		if n.Parent != "" && in[n.Parent] {
			edges = append(edges, edge{From: n.Parent, To: n.ID, Type: "parent-child"})
		}
		if rel {
			edges = append(edges, relationshipEdges(&n, in)...)
		}
	}
	return map[string]any{"nodes": nonNil(nodes), "edges": s.structureEdges(cs, edges)}, nil
}

func relationshipEdges(a *registry.Agent, in map[string]bool) []edge {
	var rels []struct {
		Type    string `json:"type"`
		AgentID string `json:"agentId"`
	}
	if json.Unmarshal(a.Relationships, &rels) != nil {
		return nil
	}
	var out []edge
	for _, r := range rels {
		if !in[r.AgentID] {
			continue
		}
		switch r.Type {
		case "peer", "supervisor", "collaborator":
			out = append(out, edge{From: a.ID, To: r.AgentID, Type: r.Type})
		case "supervised":
			out = append(out, edge{From: r.AgentID, To: a.ID, Type: "supervisor"})
		}
	}
	return out
}
