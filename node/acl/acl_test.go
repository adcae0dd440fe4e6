package acl

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/node/mapsvc"
	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func newKeyRecord(t *testing.T, pattern string, types ...string) (*concordv1.ApiKey, string) {
	t.Helper()
	id, token, hash := NewKey()
	return &concordv1.ApiKey{Id: id, SecretSha256: hash, ParticipantIdPattern: pattern, ParticipantTypes: types}, token
}

func TestParseKey(t *testing.T) {
	id, token, hash := NewKey()
	gotID, gotHash, err := ParseKey(token)
	if err != nil || gotID != id || string(gotHash) != string(hash) {
		t.Fatalf("round trip: %v %q", err, gotID)
	}
	if !strings.HasPrefix(token, KeyPrefix) {
		t.Fatalf("token %q lacks the prefix", token)
	}
	for _, bad := range []string{"", token[:len(token)-1], token + "x", "x" + token[1:],
		strings.Replace(token, "_", "-", 3), KeyPrefix + strings.Repeat("Z", keyLen-len(KeyPrefix))} {
		if _, _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	_, token, _ := NewKey()
	f.Add(token)
	f.Add("map_sk_")
	f.Add(KeyPrefix + strings.Repeat("0", 80))
	f.Fuzz(func(t *testing.T, s string) {
		id, hash, err := ParseKey(s)
		if err == nil && (len(id) != idLen || len(hash) != 32) {
			t.Fatalf("accepted %q as id %q", s, id)
		}
	})
}

func TestModule_ApplySnapshotRestore(t *testing.T) {
	m := NewModule()
	h := m.Handlers()
	k1, _ := newKeyRecord(t, "team-*", "agent")
	k2, _ := newKeyRecord(t, "ops", "system", "client")
	create := h[concordv1.CommandType_COMMAND_TYPE_ACL_KEY_CREATE].Apply
	revoke := h[concordv1.CommandType_COMMAND_TYPE_ACL_KEY_REVOKE].Apply
	for i, k := range []*concordv1.ApiKey{k1, k2} {
		if _, err := create(uint64(i+1), &concordv1.AclKeyCreate{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := create(3, &concordv1.AclKeyCreate{Key: k1}); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("duplicate: %v", err)
	}
	bad := proto.CloneOf(k1)
	bad.Id, bad.ParticipantTypes = "other", []string{"root"}
	if _, err := create(4, &concordv1.AclKeyCreate{Key: bad}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("invalid type: %v", err)
	}
	for _, systems := range [][]string{{"a:b"}, {""}, {"lab", "x/y"}} {
		badGW := proto.CloneOf(k1)
		badGW.Id, badGW.GatewaySources = "gw", systems
		if _, err := create(4, &concordv1.AclKeyCreate{Key: badGW}); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("gateway sources %q: %v", systems, err)
		}
		badGW.GatewaySources, badGW.GatewayTargets = nil, systems
		if _, err := create(4, &concordv1.AclKeyCreate{Key: badGW}); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("gateway targets %q: %v", systems, err)
		}
	}
	if _, err := revoke(5, &concordv1.AclKeyRevoke{Id: "nope"}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	recs := persist(t, m)
	if _, err := revoke(6, &concordv1.AclKeyRevoke{Id: k1.Id}); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Key(k1.Id); ok {
		t.Fatal("revoked key still present")
	}
	fresh := restoreFrom(t, recs)
	if got := fresh.Keys(); len(got) != 2 || !proto.Equal(got[0], minKey(k1, k2)) {
		t.Fatalf("restored %v", got)
	}
}

func minKey(a, b *concordv1.ApiKey) *concordv1.ApiKey {
	if a.Id < b.Id {
		return a
	}
	return b
}

// jwtEnv is an Ed25519 issuer with its JWKS file.
type jwtEnv struct {
	priv ed25519.PrivateKey
	file string
}

func newJWTEnv(t testing.TB) *jwtEnv {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: "k1", Algorithm: string(jose.EdDSA), Use: "sig"}}}
	b, _ := json.Marshal(set)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return &jwtEnv{priv: priv, file: file}
}

func (e *jwtEnv) sign(t testing.TB, kid string, claims ...any) string {
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: e.priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	b := jwt.Signed(sig)
	for _, c := range claims {
		b = b.Claims(c)
	}
	s, err := b.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAuthenticator(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	je := newJWTEnv(t)
	keys := NewModule()
	k, token := newKeyRecord(t, "team-*", "agent", "client")
	k.Capabilities = []string{"messaging.canSend"}
	sysKey, sysToken := newKeyRecord(t, "ops", "system")
	old, oldToken := newKeyRecord(t, "old", "agent")
	old.ExpiresMs = now.Add(-time.Second).UnixMilli()
	gwKey, gwToken := newKeyRecord(t, "gw-lab", "gateway")
	gwKey.GatewaySources, gwKey.GatewayTargets = []string{"lab"}, []string{"dc1", "*"}
	for _, r := range []*concordv1.ApiKey{k, sysKey, old, gwKey} {
		if _, err := keys.applyKeyCreate(&concordv1.AclKeyCreate{Key: r}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(Config{Keys: keys, JWT: &JWTConfig{JWKSFile: je.file, Issuer: "https://idp", Audience: "concord"},
		AnonymousTypes: []string{"agent"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	std := func(sub string, exp time.Time) jwt.Claims {
		return jwt.Claims{Subject: sub, Issuer: "https://idp", Audience: jwt.Audience{"concord"}, Expiry: jwt.NewNumericDate(exp)}
	}
	good := je.sign(t, "k1", std("alice", now.Add(time.Hour)),
		map[string]any{"map:participantTypes": []string{"agent", "system"}, "map:capabilities": map[string]any{"lifecycle": map[string]bool{"canStop": true, "canSpawn": false}}})
	cases := []struct {
		name, method, cred string
		code               int
		check              func(*mapsvc.Principal) bool
	}{
		{"anonymous", "none", "", 0, func(p *mapsvc.Principal) bool {
			return p.Anonymous() && p.Types[0] == "agent" && p.ParticipantIDPattern == ""
		}},
		{"api key", "api-key", token, 0, func(p *mapsvc.Principal) bool {
			return p.ID == "key:"+k.Id && p.ParticipantIDPattern == "team-*" && len(p.Capabilities) == 1
		}},
		{"system api key", "api-key", sysToken, 0, func(p *mapsvc.Principal) bool { return p.Types[0] == "system" && p.Capabilities == nil }},
		{"gateway api key", "api-key", gwToken, 0, func(p *mapsvc.Principal) bool {
			return p.Types[0] == "gateway" && slices.Equal(p.GatewaySources, []string{"lab"}) && slices.Equal(p.GatewayTargets, []string{"dc1", "*"})
		}},
		{"gateway bearer", "bearer", je.sign(t, "k1", std("gw", now.Add(time.Hour)), map[string]any{"map:participantTypes": []string{"gateway"},
			"map:gatewaySources": []string{"lab"}, "map:gatewayTargets": []string{"*"}}), 0, func(p *mapsvc.Principal) bool {
			return p.Types[0] == "gateway" && slices.Equal(p.GatewaySources, []string{"lab"}) && slices.Equal(p.GatewayTargets, []string{"*"})
		}},
		{"wrong secret", "api-key", token[:len(token)-2] + "AA", rpc.CodeAuthFailed, nil},
		{"garbage key", "api-key", "hunter2", rpc.CodeAuthFailed, nil},
		{"expired key", "api-key", oldToken, rpc.CodeTokenExpired, nil},
		{"bearer", "bearer", good, 0, func(p *mapsvc.Principal) bool {
			return p.ID == "alice" && p.ParticipantIDPattern == "alice" && p.Issuer == "https://idp" &&
				len(p.Types) == 2 && len(p.Capabilities) == 1 && p.Capabilities[0] == "lifecycle.canStop"
		}},
		{"bearer default types", "bearer", je.sign(t, "k1", std("bob", now.Add(time.Hour))), 0, func(p *mapsvc.Principal) bool {
			return len(p.Types) == 2 && p.Types[0] == "agent" && p.Capabilities == nil
		}},
		{"expired jwt", "bearer", je.sign(t, "k1", std("alice", now.Add(-time.Hour))), rpc.CodeTokenExpired, nil},
		{"wrong audience", "bearer", je.sign(t, "k1", jwt.Claims{Subject: "a", Issuer: "https://idp", Audience: jwt.Audience{"x"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}), rpc.CodeAuthFailed, nil},
		{"wrong issuer", "bearer", je.sign(t, "k1", jwt.Claims{Subject: "a", Issuer: "evil", Audience: jwt.Audience{"concord"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}), rpc.CodeAuthFailed, nil},
		{"no exp", "bearer", je.sign(t, "k1", jwt.Claims{Subject: "a", Issuer: "https://idp", Audience: jwt.Audience{"concord"}}), rpc.CodeAuthFailed, nil},
		{"wildcard sub", "bearer", je.sign(t, "k1", std("a*", now.Add(time.Hour))), rpc.CodeAuthFailed, nil},
		{"unknown kid", "bearer", je.sign(t, "k2", std("alice", now.Add(time.Hour))), rpc.CodeAuthFailed, nil},
		{"other signer", "bearer", newJWTEnv(t).sign(t, "k1", std("alice", now.Add(time.Hour))), rpc.CodeAuthFailed, nil},
		{"alg none", "bearer", "eyJhbGciOiJub25lIiwia2lkIjoiazEifQ.eyJzdWIiOiJhbGljZSJ9.", rpc.CodeAuthFailed, nil},
		{"unknown method", "x-magic", "", rpc.CodeMethodNotSupported, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := a.Authenticate(context.Background(), tc.method, tc.cred)
			if tc.code != 0 {
				var re *rpc.Error
				if !errors.As(err, &re) || re.Code != tc.code {
					t.Fatalf("err %v, want code %d", err, tc.code)
				}
				if tc.cred != "" && strings.Contains(re.Error(), tc.cred) {
					t.Fatal("error echoes the credential")
				}
				return
			}
			if err != nil || !tc.check(p) {
				t.Fatalf("principal %+v err %v", p, err)
			}
		})
	}
	closed, _ := New(Config{Keys: keys})
	if _, err := closed.Authenticate(context.Background(), "none", ""); err == nil {
		t.Fatal("anonymous accepted with no anonymous policy")
	}
	if _, err := New(Config{AnonymousTypes: []string{"system"}}); err == nil {
		t.Fatal("anonymous system participants accepted by Validate")
	}
}

func FuzzVerifyJWT(f *testing.F) {
	je := newJWTEnv(f)
	v, err := newJWTVerifier(JWTConfig{JWKSFile: je.file, Issuer: "i", Audience: "a"}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	f.Add(je.sign(f, "k1", jwt.Claims{Subject: "s", Issuer: "i", Audience: jwt.Audience{"a"}, Expiry: jwt.NewNumericDate(now.Add(time.Hour))}))
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJIUzI1NiJ9.e30.")
	f.Fuzz(func(t *testing.T, raw string) {
		vt, err := v.verify(context.Background(), raw, now)
		if err == nil && (vt.sub == "" || vt.kid == "") {
			t.Fatal("accepted a token without subject")
		}
	})
}

func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"k"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"oct","k":"AAAA","kid":"k"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := parseJWKS(b)
		if err != nil {
			return
		}
		for _, k := range set.Keys {
			if !k.IsPublic() || k.KeyID == "" {
				t.Fatalf("kept a non-public or unnamed key %+v", k)
			}
		}
	})
}

type eventLog []registry.Event

func (l *eventLog) AppendEvents(_ uint64, evs []registry.Event) []registry.Event {
	*l = append(*l, evs...)
	return evs
}

func TestModule_ParticipantPermissions(t *testing.T) {
	var log eventLog
	m := NewModule().WithEvents(&log)
	upd := m.Handlers()[concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE].Apply
	k, _ := newKeyRecord(t, "team-*", "agent")
	if _, err := m.applyKeyCreate(&concordv1.AclKeyCreate{Key: k}); err != nil {
		t.Fatal(err)
	}
	changed := m.Changed()
	if _, err := upd(1, &concordv1.AclPermissionsUpdate{ParticipantId: "bob", Deny: []string{"messaging.canSend", "lifecycle.canStop"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("a ceiling change did not wake Changed waiters")
	}
	if _, err := upd(2, &concordv1.AclPermissionsUpdate{ParticipantId: "bob", Allow: []string{"lifecycle.canStop"}}); err != nil {
		t.Fatal(err)
	}
	if got := m.Denied("bob"); len(got) != 1 || got[0] != "messaging.canSend" {
		t.Fatalf("denied %v", got)
	}
	if len(log) != 2 || log[1].Type != EventPermissionsClientUpdated || !strings.Contains(string(log[1].Data), `"denied":["messaging.canSend"]`) {
		t.Fatalf("events %+v", log)
	}
	for _, bad := range []*concordv1.AclPermissionsUpdate{{ParticipantId: "", Deny: []string{"messaging.canSend"}},
		{ParticipantId: "x", Deny: []string{"root.everything"}}} {
		if _, err := upd(3, bad); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	// Snapshot and restore keep keys and ceilings; an old snapshot of keys
	// alone still restores.
	recs := persist(t, m)
	got := restoreFrom(t, recs)
	if d := got.Denied("bob"); len(d) != 1 || len(got.Keys()) != 1 {
		t.Fatalf("restored denied %v keys %d", d, len(got.Keys()))
	}
	old := restoreFrom(t, recs[:1])
	if len(old.Keys()) != 1 || old.Denied("bob") != nil {
		t.Fatal("a keys-only snapshot did not restore")
	}
	if _, err := upd(4, &concordv1.AclPermissionsUpdate{ParticipantId: "bob", Allow: []string{"messaging.canSend"}}); err != nil {
		t.Fatal(err)
	}
	if m.Denied("bob") != nil {
		t.Fatal("allowing every denied flag should drop the record")
	}
}

// persist snapshots m and returns its records.
func persist(t *testing.T, m *Module) [][]byte {
	t.Helper()
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	if err := snap.Persist(func(b []byte) error { recs = append(recs, slices.Clone(b)); return nil }); err != nil {
		t.Fatal(err)
	}
	return recs
}

// restoreFrom restores a fresh module from snapshot records.
func restoreFrom(t *testing.T, recs [][]byte) *Module {
	t.Helper()
	fresh := NewModule()
	i := 0
	commit, err := fresh.Restore(func() ([]byte, error) {
		if i == len(recs) {
			return nil, io.EOF
		}
		i++
		return recs[i-1], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	commit()
	return fresh
}

// TestModule_ClientPermissions: actions are withdrawn beside capability
// flags, limits merge (set, change, clear with -1), survive a snapshot,
// and a record with neither is dropped; bad limits change nothing.
func TestModule_ClientPermissions(t *testing.T) {
	m := NewModule()
	upd := m.Handlers()[concordv1.CommandType_COMMAND_TYPE_ACL_PERMISSIONS_UPDATE].Apply
	steps := []struct {
		u          *concordv1.AclPermissionsUpdate
		wantDenied []string
		wantLimits map[string]int64
	}{
		{&concordv1.AclPermissionsUpdate{ParticipantId: "bob", Deny: []string{"actions.sendMessages"},
			Limits: map[string]int64{"messagesPerMinute": 10, "subscriptions": 2}},
			[]string{"actions.sendMessages"}, map[string]int64{"messagesPerMinute": 10, "subscriptions": 2}},
		{&concordv1.AclPermissionsUpdate{ParticipantId: "bob", Limits: map[string]int64{"messagesPerMinute": 5, "subscriptions": -1}},
			[]string{"actions.sendMessages"}, map[string]int64{"messagesPerMinute": 5}},
		{&concordv1.AclPermissionsUpdate{ParticipantId: "bob", Allow: []string{"actions.sendMessages"}},
			nil, map[string]int64{"messagesPerMinute": 5}},
	}
	for i, st := range steps {
		if _, err := upd(uint64(i+1), st.u); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := m.Denied("bob"); !slices.Equal(got, st.wantDenied) {
			t.Fatalf("step %d: denied %v, want %v", i, got, st.wantDenied)
		}
		if got := m.Limits("bob"); !maps.Equal(got, st.wantLimits) {
			t.Fatalf("step %d: limits %v, want %v", i, got, st.wantLimits)
		}
	}
	if got := restoreFrom(t, persist(t, m)).Limits("bob"); !maps.Equal(got, map[string]int64{"messagesPerMinute": 5}) {
		t.Fatalf("restored limits %v", got)
	}
	for _, bad := range []*concordv1.AclPermissionsUpdate{
		{ParticipantId: "bob", Deny: []string{"actions.fly"}},
		{ParticipantId: "bob", Limits: map[string]int64{"cats": 1}},
		{ParticipantId: "bob", Limits: map[string]int64{"subscriptions": -2}},
	} {
		if _, err := upd(9, bad); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	if _, err := upd(10, &concordv1.AclPermissionsUpdate{ParticipantId: "bob", Limits: map[string]int64{"messagesPerMinute": -1}}); err != nil {
		t.Fatal(err)
	}
	if m.Limits("bob") != nil || m.Denied("bob") != nil {
		t.Fatal("a record with no denial and no limit should be dropped")
	}
}
