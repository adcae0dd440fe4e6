package mapclient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// RegisterAgent registers an agent owned by this session and remembers it:
// when a reconnect lands in a session that does not own it any more, the
// client registers it again. It returns the agent object of the result.
func (c *Client) RegisterAgent(ctx context.Context, spec AgentSpec) (json.RawMessage, error) {
	raw, err := c.Call(ctx, "map/agents/register", spec)
	if err != nil {
		return nil, err
	}
	var res struct {
		Agent json.RawMessage `json:"agent"`
	}
	var agent struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &res) != nil || json.Unmarshal(res.Agent, &agent) != nil || agent.ID == "" {
		return nil, fmt.Errorf("%w: map/agents/register result %s", ErrBadResponse, truncate(raw, 200))
	}
	spec.AgentID = agent.ID
	c.mu.Lock()
	if !slices.ContainsFunc(c.agents, func(a AgentSpec) bool { return a.AgentID == spec.AgentID }) {
		c.agents = append(c.agents, spec)
	}
	c.mu.Unlock()
	return res.Agent, nil
}

// UnregisterAgent unregisters an agent and forgets it.
func (c *Client) UnregisterAgent(ctx context.Context, agentID, reason string) error {
	c.mu.Lock()
	c.agents = slices.DeleteFunc(c.agents, func(a AgentSpec) bool { return a.AgentID == agentID })
	c.mu.Unlock()
	params := map[string]string{"agentId": agentID}
	if reason != "" {
		params["reason"] = reason
	}
	_, err := c.Call(ctx, "map/agents/unregister", params)
	return err
}

// Send sends a message (map/send).
func (c *Client) Send(ctx context.Context, p SendParams) (SendResult, error) {
	var res SendResult
	err := c.CallResult(ctx, "map/send", p, &res)
	return res, err
}
