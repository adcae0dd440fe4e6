package mapsvc

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/concordmap/concord/node/registry"
)

// TestAgentResult_SameObjectAsAMap: the hand-encoded result is the object
// the handlers used to return as a map.
func TestAgentResult_SameObjectAsAMap(t *testing.T) {
	a := registry.Agent{ID: "w1", Name: "<w>", State: registry.StateBusy, OwnerID: "p1",
		Lifecycle: registry.Lifecycle{CreatedAt: 5, LastActiveAt: 9}, Metadata: json.RawMessage(`{"k":[1,"v"]}`)}
	tests := []struct {
		name string
		res  *agentResult
		old  map[string]any
	}{
		{"update", &agentResult{agent: a}, map[string]any{"agent": a}},
		{"unregister", &agentResult{flag: "unregistered", agent: a}, map[string]any{"unregistered": true, "agent": a}},
		{"stop, orphan", &agentResult{flag: "stopping", agent: registry.Agent{ID: "o", State: registry.StateStopped}},
			map[string]any{"stopping": true, "agent": registry.Agent{ID: "o", State: registry.StateStopped}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.res.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			viaMarshal, err := json.Marshal(tt.res)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(tt.old)
			if err != nil {
				t.Fatal(err)
			}
			var g, m, w any
			for _, x := range []struct {
				b []byte
				v *any
			}{{got, &g}, {viaMarshal, &m}, {want, &w}} {
				if err := json.Unmarshal(x.b, x.v); err != nil {
					t.Fatalf("%s: %v", x.b, err)
				}
			}
			if !reflect.DeepEqual(g, w) || !reflect.DeepEqual(m, w) {
				t.Fatalf("AppendJSON = %s\nMarshalJSON = %s\nwant %s", got, viaMarshal, want)
			}
		})
	}
}
