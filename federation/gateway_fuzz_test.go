package federation

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeGatewayRoute: any map/federation/route params a gateway sends
// decode or are refused with -32602, never a panic; what is accepted is
// well formed, and its link envelope keeps hop count and path in step.
func FuzzDecodeGatewayRoute(f *testing.F) {
	for _, s := range []string{
		sdkEnvelope("lab", "dc1", 0, `["lab"]`, "5", `{"agent":"bob"}`),
		sdkEnvelope("lab", "dc2", 2, "", "", `"dc2:scope:room"`),
		`{"systemId":"dc1","message":{"message":{"from":"a","to":"b"},"federation":{"sourceSystem":"lab","targetSystem":"dc1","hopCount":0,"timestamp":1}}}`,
		`{"systemId":"dc1","envelope":{"payload":{"from":"a","to":"b"},"routing":{"from":"lab","to":"dc1","hops":["lab"],"maxHops":2},"timestamp":1}}`,
		`{"systemId":"dc1","message":{"from":"a","to":{"system":"dc1","agent":"b"}}}`,
		`{"systemId":"dc1","payload":{"from":"a","to":"b"},"maxHops":0}`,
		`{}`, `[]`, `null`, `{"systemId":"dc1","envelope":{"federation":{}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, cerr := DecodeGatewayRoute(json.RawMessage(b), 512)
		if cerr != nil {
			if cerr.Code != CodeInvalidParams || cerr.Message == "" {
				t.Fatalf("refusal %d %q", cerr.Code, cerr.Message)
			}
			return
		}
		switch {
		case !validSystemID(r.SystemID) || !validSystemID(r.Target):
			t.Fatalf("accepted system ids %q / %q", r.SystemID, r.Target)
		case r.Form != FormMessage && (!validSystemID(r.Source) || len(r.Path) == 0 || r.Path[0] != r.Source || int(r.Arrival) < len(r.Path)):
			t.Fatalf("accepted source %q path %v arrival %d", r.Source, r.Path, r.Arrival)
		case (r.ToAgent == "") == (r.ToScope == "") || !validEntityID(r.From) || strings.Contains(r.ToAgent+r.ToScope, ":"):
			t.Fatalf("accepted sender %q recipient %q/%q", r.From, r.ToAgent, r.ToScope)
		case len(r.Payload)+len(r.Meta) > 512 || len(r.Payload) > 0 && !json.Valid(r.Payload) || len(r.Meta) > 0 && !json.Valid(r.Meta):
			t.Fatalf("accepted payload %q meta %q", r.Payload, r.Meta)
		}
		if r.Form == FormMessage || r.Arrival > r.MaxHops {
			return
		}
		env := r.envelope(1)
		if int(env.GetHopCount()) != len(env.GetPath()) || env.GetHopCount() > env.GetMaxHops() || env.GetMaxHops() > r.MaxHops {
			t.Fatalf("envelope hops %d/%d path %v from %+v", env.GetHopCount(), env.GetMaxHops(), env.GetPath(), r)
		}
		_ = BuildMessage(env)
	})
}
