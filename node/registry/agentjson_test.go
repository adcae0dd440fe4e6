package registry

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// topKeys lists the top-level member names of a JSON object, in order.
func topKeys(t *testing.T, b []byte) []string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	if _, err := d.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for d.More() {
		k, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestAgent_AppendJSONMatchesMarshalJSON: the hand-written encoding is
// MarshalJSON's object, member for member and in the same order.
func TestAgent_AppendJSONMatchesMarshalJSON(t *testing.T) {
	tests := []struct {
		name string
		a    Agent
	}{
		{"minimal orphan", Agent{ID: "a1", State: StateRegistered}},
		{"every field", Agent{
			ID: "a2", Name: "N", Description: "d", Role: "r", Parent: "p", Scopes: []string{"s1", "s2"},
			State: StateActive, OwnerID: "owner-1", Visibility: "public", SessionID: "hidden", HomeNode: "hidden",
			Lifecycle:    Lifecycle{CreatedAt: 1, StartedAt: 2, StoppedAt: 3, LastActiveAt: 4, OrphanedAt: 5, ExitReason: "done"},
			Capabilities: json.RawMessage(`{"c":1}`), CapabilityDescriptor: json.RawMessage(`{"d":[1,2]}`),
			Environment: json.RawMessage(`{"e":"x"}`), Metadata: json.RawMessage(`{"m":null}`),
			PermissionOverrides: json.RawMessage(`{"p":true}`), PersistentIdentity: json.RawMessage(`{"i":"1"}`),
			Relationships: json.RawMessage(`[{"r":1}]`), Meta: json.RawMessage(`{"_":{}}`),
		}},
		{"only exit reason", Agent{ID: "a3", State: StateStopped, Lifecycle: Lifecycle{ExitReason: "crash"}}},
		{"escapes", Agent{ID: "a\"4\\", Name: "<b>&</b>\n\u2028\xff", State: "x-custom", OwnerID: "o\t"}},
		{"empty scopes", Agent{ID: "a5", State: StateIdle, Scopes: []string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := tt.a.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			got := tt.a.AppendJSON([]byte("prefix"))
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("AppendJSON dropped what b held: %q", got)
			}
			got = got[len("prefix"):]
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("AppendJSON wrote invalid JSON %s: %v", got, err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("AppendJSON = %s\nMarshalJSON = %s", got, want)
			}
			if gk, wk := topKeys(t, got), topKeys(t, want); !reflect.DeepEqual(gk, wk) {
				t.Fatalf("member order %v, want %v", gk, wk)
			}
		})
	}
}

func BenchmarkAgentJSON(b *testing.B) {
	a := Agent{ID: "bench-agent-17", Name: "worker", State: StateActive, OwnerID: "agent-01J000", Visibility: "public",
		Lifecycle: Lifecycle{CreatedAt: 1700000000000, StartedAt: 1700000000001, LastActiveAt: 1700000000002},
		Metadata:  json.RawMessage(`{"n":42,"note":"x"}`)}
	b.Run("MarshalJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = a.AppendJSON(buf[:0])
		}
	})
}
