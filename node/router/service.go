package router

import (
	"fmt"
	"strings"

	"github.com/concordmap/concord/federation"
)

// RegisterService makes svc the recipient of every map/send addressed to id
// (the string "<id>" or "agent:<id>", or {"agent": "<id>"}); an id shadows
// an agent registered with the same id. Register services while wiring the
// node, before it serves; it is safe to call concurrently with sends, and
// refuses an empty id, a nil service or an id already taken.
func (r *Router) RegisterService(id string, svc LocalService) error {
	if id == "" || svc == nil {
		return fmt.Errorf("%w: RegisterService: empty id or nil service", ErrInvalidConfig)
	}
	for {
		old := r.services.Load()
		next := make(map[string]LocalService, 1)
		if old != nil {
			if _, taken := (*old)[id]; taken {
				return fmt.Errorf("%w: RegisterService: %q already registered", ErrInvalidConfig, id)
			}
			for k, v := range *old {
				next[k] = v
			}
		}
		next[id] = svc
		if r.services.CompareAndSwap(old, &next) {
			return nil
		}
	}
}

// serviceAt returns the LocalService an address names, if any: the string
// "<id>" or "agent:<id>", or {"agent": "<id>"}, with id registered, and the
// federated forms "<sys>:agent:<id>" / {"system": "<sys>", "agent": "<id>"}
// naming this system. Other forms never reach a service ({agents: [id]} or
// {scope: id} included).
func (r *Router) serviceAt(a address) LocalService {
	m := r.services.Load()
	if m == nil {
		return nil
	}
	switch a.kind {
	case addrAgent:
		return (*m)[a.id]
	case addrFederated:
		if r.fed != nil && a.id == r.fed.SystemID() && a.agent != "" {
			return (*m)[a.agent]
		}
	case addrString:
		if svc, ok := (*m)[a.id]; ok {
			return svc
		}
		if rest, ok := strings.CutPrefix(a.id, "agent:"); ok {
			return (*m)[rest]
		}
		if sys, id, ok := federation.ParseRemoteID(a.id); ok && r.fed != nil && sys == r.fed.SystemID() {
			return (*m)[id]
		}
	}
	return nil
}
