package federation

import (
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// TestMayAskGuarantee: the quick meta check never says no where
// wantsGuarantee's decoding says yes, escapes included.
func TestMayAskGuarantee(t *testing.T) {
	for _, tt := range []struct {
		meta      string
		may, want bool
	}{
		{``, false, false},
		{`{"expectsResponse":true}`, false, false},
		{`{"correlationId":"01J"}`, false, false},
		{`{"delivery":"guaranteed"}`, true, true},
		{`{"delivery":"best-effort","note":"guaranteed"}`, true, false},
		{`{"delivery":"guar\u0061nteed"}`, true, true},
		{`{"deliver\u0079":"guaranteed"}`, true, true},
		{`{"x":"a\"b"}`, true, false},
	} {
		if got := mayAskGuarantee([]byte(tt.meta)); got != tt.may {
			t.Errorf("mayAskGuarantee(%s) = %v, want %v", tt.meta, got, tt.may)
		}
		if got := wantsGuarantee([]byte(tt.meta), nil); got != tt.want {
			t.Errorf("wantsGuarantee(%s) = %v, want %v", tt.meta, got, tt.want)
		}
	}
}

func FuzzMayAskGuarantee(f *testing.F) {
	for _, s := range []string{`{"delivery":"guaranteed"}`, `{"delivery":"guar\u0061nteed"}`, `{}`, `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, meta []byte) {
		if wantsGuarantee(meta, nil) && !mayAskGuarantee(meta) {
			t.Fatalf("meta %q asks for a guarantee the quick check misses", meta)
		}
	})
}

// TestState_HasLinkAndOutboxGuaranteed: the copy-free reads answer as
// Link would.
func TestState_HasLinkAndOutboxGuaranteed(t *testing.T) {
	s := NewState()
	g := link("dc3")
	g.Outbox = &concordv1.FedOutboxPolicy{Guaranteed: true}
	for _, l := range []*concordv1.FedLink{link("dc2"), g} {
		if err := apply(t, s, cmdPut, &concordv1.FedLinkPut{Link: l, NowMs: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		peer            string
		has, guaranteed bool
	}{{"dc2", true, false}, {"dc3", true, true}, {"dc9", false, false}} {
		if s.HasLink(tt.peer) != tt.has || s.OutboxGuaranteed(tt.peer) != tt.guaranteed {
			t.Errorf("%s: HasLink %v OutboxGuaranteed %v, want %v %v", tt.peer, s.HasLink(tt.peer), s.OutboxGuaranteed(tt.peer), tt.has, tt.guaranteed)
		}
	}
}
