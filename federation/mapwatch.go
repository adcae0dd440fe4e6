package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// agentEventTypes are the agent events the watcher subscribes to, in the
// SDK's constant names and the dotted names its reference server emits.
var agentEventTypes = []string{
	"agent_registered", "agent_unregistered", "agent_state_changed",
	"agent.registered", "agent.unregistered", "agent.state.changed",
}

// maxListPages bounds one directory read (map/agents/list pages).
const maxListPages = 100

// watch keeps a client session on the foreign server that lists its
// agents (on every agent event, and every DirectorySync) and stores them
// as the link's imported directory, until the role ends.
func (h *holding) watch() {
	l := h.l
	var last []*concordv1.FedRemoteAgent // what this holder proposed last
	proposed := false
	for attempt := 0; h.ctx.Err() == nil; attempt++ {
		wasUp, err := h.watchSession(&last, &proposed)
		if h.ctx.Err() != nil {
			return
		}
		if wasUp {
			attempt = 0
		}
		l.log.Info("map link watcher disconnected", "err", err)
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(jitter(attempt, l.m.cfg.BackoffMin, l.m.cfg.BackoffMax)):
		}
	}
}

func (h *holding) watchSession(last *[]*concordv1.FedRemoteAgent, proposed *bool) (wasUp bool, err error) {
	l := h.l
	refresh := make(chan struct{}, 1)
	onNotify := func(method string, _ json.RawMessage) {
		if method == "map/event" {
			select {
			case refresh <- struct{}{}:
			default:
			}
		}
	}
	cctx, cancel := context.WithTimeout(h.ctx, l.m.cfg.CallTimeout)
	defer cancel()
	conn, err := l.m.deps.MAPDial(cctx, h.link.GetMap(), onNotify)
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	raw, err := conn.Call(cctx, "map/connect", connectParams(h.link.GetMap(), "client", "concord-"+l.m.cfg.SystemID, "", ""))
	if err == nil {
		_, err = parseConnect(raw)
	}
	if err != nil {
		return false, fmt.Errorf("map/connect: %w", err)
	}
	// Events only make the directory fresher sooner; a server without
	// subscriptions is read every DirectorySync.
	if _, err := conn.Call(cctx, "map/subscribe", map[string]any{"filter": map[string]any{"eventTypes": agentEventTypes}}); err != nil {
		l.log.Debug("map link watcher: no agent events from the foreign server", "err", err)
	}
	h.setWatchUp(true)
	defer h.setWatchUp(false)
	l.countReconnect()
	l.m.event("federation_connected", l.peer, map[string]any{"systemId": l.peer, "nodeId": l.m.cfg.NodeID, "server": RedactURL(h.link.GetMap().GetUrl())})
	defer l.m.event("federation_disconnected", l.peer, map[string]any{"systemId": l.peer, "nodeId": l.m.cfg.NodeID})
	tick := time.NewTicker(l.m.cfg.DirectorySync)
	defer tick.Stop()
	for {
		if err := h.syncDirectory(conn, last, proposed); err != nil {
			l.log.Debug("map link directory", "err", err) // a lost connection shows below
		}
		select {
		case <-h.ctx.Done():
			return true, h.ctx.Err()
		case <-conn.Done():
			return true, fmt.Errorf("connection closed")
		case <-refresh:
		case <-tick.C:
		}
	}
}

// syncDirectory lists the foreign agents and proposes them when they
// differ from what this holder proposed last. Our own proxies are left
// out; a previous holder's proxies are unregistered (best effort).
func (h *holding) syncDirectory(conn MAPConn, last *[]*concordv1.FedRemoteAgent, proposed *bool) error {
	l := h.l
	ctx, cancel := context.WithTimeout(h.ctx, l.m.cfg.CallTimeout)
	defer cancel()
	agents, stale, err := h.listForeign(ctx, conn)
	if err != nil {
		return err
	}
	for _, id := range stale {
		if _, err := conn.Call(ctx, "map/agents/unregister", map[string]any{"agentId": id, "reason": "stale proxy of a previous Concord holder"}); err != nil {
			l.log.Debug("unregister a stale proxy", "foreign_agent", id, "err", err)
		}
	}
	if *proposed && slices.EqualFunc(agents, *last, func(a, b *concordv1.FedRemoteAgent) bool { return proto.Equal(a, b) }) {
		return nil
	}
	mp := h.link.GetMap()
	_, _, err = l.m.deps.Store.Apply(ctx, concordv1.CommandType_COMMAND_TYPE_FED_MAP_DIRECTORY, &concordv1.FedMapDirectory{
		PeerSystemId: l.peer, HolderNodeId: mp.GetHolderNodeId(), HolderEpoch: mp.GetHolderEpoch(), Agents: agents})
	if err != nil {
		return fmt.Errorf("store the foreign directory: %w", err)
	}
	*last, *proposed = agents, true
	return nil
}

// listForeign reads map/agents/list (every page, bounded). It returns the
// foreign agents to import (sorted, invalid ones dropped and counted) and
// the ids of proxies a previous holder of this system left behind.
func (h *holding) listForeign(ctx context.Context, conn MAPConn) (agents []*concordv1.FedRemoteAgent, stale []string, err error) {
	l := h.l
	seen := map[string]bool{}
	size, dropped := 0, 0 // encoded bytes of agents; agents past MaxForeignDirectoryBytes
	cursor := ""
	for page := 0; page < maxListPages; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := conn.Call(ctx, "map/agents/list", params)
		if err != nil {
			return nil, nil, fmt.Errorf("map/agents/list: %w", err)
		}
		var res listResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, nil, fmt.Errorf("%w: map/agents/list: %w", errForeign, err)
		}
		for _, raw := range res.Agents {
			fa, ok := decodeAgent(raw)
			if !ok {
				l.countInError()
				continue
			}
			a := &fa
			if md := a.meta(); md.ConcordProxy && md.ConcordSystem == l.m.cfg.SystemID {
				if md.ConcordHolder != h.marker {
					stale = append(stale, a.ID)
				}
				continue
			}
			ra := a.remote()
			if ValidForeignAgent(ra) != nil || seen[ra.GetId()] || len(agents) >= MaxForeignAgents {
				l.countInError()
				continue
			}
			n := proto.Size(ra) + 8 // with its field tag and length
			if size+n > MaxForeignDirectoryBytes {
				dropped++
				l.countInError()
				continue
			}
			seen[ra.GetId()] = true
			size += n
			agents = append(agents, ra)
		}
		if res.NextCursor == "" || res.NextCursor == cursor {
			break
		}
		cursor = res.NextCursor
	}
	if dropped > 0 {
		l.log.Warn("foreign directory larger than one proposal may carry; agents left out",
			"peer", l.peer, "kept", len(agents), "dropped", dropped, "max_bytes", MaxForeignDirectoryBytes)
	}
	slices.SortFunc(agents, func(a, b *concordv1.FedRemoteAgent) int { return cmpString(a.GetId(), b.GetId()) })
	return agents, stale, nil
}
