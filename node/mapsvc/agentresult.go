package mapsvc

import "github.com/concordmap/concord/node/registry"

// agentResult is the result of an agent write: {"<flag>":true,"agent":{...}}
// (flag "" leaves it out: {"agent":{...}}). It encodes itself without
// reflection (node/rpc's AppendJSON path): map/agents/update answers every
// write with one, and a map[string]any cost a map, an interface walk and a
// second, compacting pass over the agent's JSON.
type agentResult struct {
	flag  string
	agent registry.Agent
}

// AppendJSON is what node/rpc calls to encode the result.
func (r *agentResult) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	if r.flag != "" {
		b = append(append(append(b, '"'), r.flag...), `":true,`...) // flags are constants, no escaping
	}
	b = append(b, `"agent":`...)
	return append(r.agent.AppendJSON(b), '}'), nil
}

// MarshalJSON gives encoders other than node/rpc's the same object.
func (r *agentResult) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil) }
