package federation

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// applyGatewayBind records that a gateway session serves a foreign
// system. A later bind of the same system replaces the earlier one: the
// gateway that routed last is the one replies go back through.
func (s *State) applyGatewayBind(m *concordv1.FedGatewayBind) error {
	b := m.GetBinding()
	if !validSystemID(b.GetSystemId()) || b.GetSessionId() == "" {
		return fmt.Errorf("%w: gateway binding needs a valid system id and a session", ErrInvalidCommand)
	}
	if err := s.bindCurrent(b.GetSessionId(), m.GetSessionEpoch()); err != nil {
		return err
	}
	if _, linked := s.links[b.GetSystemId()]; linked {
		// A linked Concord system is reached over its link; a gateway
		// never speaks for it.
		return fmt.Errorf("%w: %s is a linked system", ErrInvalidCommand, b.GetSystemId())
	}
	s.gateways[b.GetSystemId()] = proto.CloneOf(b)
	return nil
}

// bindCurrent refuses (ErrSessionMoved) a bind from a connection that no
// longer holds its session at attach epoch ep (its route's forward held
// until the gateway resumed elsewhere): it must not replace a binding
// made since. ep 0 (not quoted) passes. The manager runs it before
// proposing too: epochs only grow, so a refusal there is final.
func (s *State) bindCurrent(sessionID string, ep uint64) error {
	if ep == 0 || s.sessions == nil {
		return nil
	}
	if cur, ok := s.sessions.SessionEpoch(sessionID); !ok || cur != ep {
		return fmt.Errorf("%w: session %s left attach epoch %d, which the routing connection holds", ErrSessionMoved, sessionID, ep)
	}
	return nil
}

// applyGatewayUnbind drops the binding of a system while it still names
// the ended session; a binding a newer gateway made since stays. A stale
// unbind is not an error: two nodes may notice the same ending. One
// quoting the epoch its session ended at is refused once the session was
// attached again since (a closed session resumed: its binding serves it
// again); a session that no longer exists ended for good.
func (s *State) applyGatewayUnbind(m *concordv1.FedGatewayUnbind) error {
	if !validSystemID(m.GetSystemId()) || m.GetSessionId() == "" {
		return fmt.Errorf("%w: gateway unbind needs a valid system id and a session", ErrInvalidCommand)
	}
	if ep := m.GetSessionEpoch(); ep != 0 && s.sessions != nil {
		if cur, ok := s.sessions.SessionEpoch(m.GetSessionId()); ok && cur != ep {
			return fmt.Errorf("%w: session %s was attached again since it ended at epoch %d", ErrSessionMoved, m.GetSessionId(), ep)
		}
	}
	if b, ok := s.gateways[m.GetSystemId()]; ok && b.GetSessionId() == m.GetSessionId() {
		delete(s.gateways, m.GetSystemId())
	}
	return nil
}

// Gateways returns copies of every gateway binding, by system id.
func (s *State) Gateways() []*concordv1.FedGatewayBinding {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*concordv1.FedGatewayBinding, 0, len(s.gateways))
	for _, k := range sortedKeys(s.gateways) {
		out = append(out, proto.CloneOf(s.gateways[k]))
	}
	return out
}

// Gateway returns a copy of the gateway binding of a foreign system.
func (s *State) Gateway(system string) (*concordv1.FedGatewayBinding, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.gateways[system]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(b), true
}
