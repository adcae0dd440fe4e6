package membership

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func validConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeID = "node-1"
	cfg.SystemID = "dc1"
	cfg.Meta.RaftAddr = "10.0.0.1:7702"
	cfg.GossipKey = testKey
	return cfg
}

func TestConfig_Validate(t *testing.T) {
	longHost := strings.Repeat("h", 250) + ":1"
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"defaults plus identity", func(*Config) {}, true},
		{"plaintext allowed without key", func(c *Config) { c.GossipKey, c.AllowPlaintext = nil, true }, true},
		{"aes-256 key", func(c *Config) { c.GossipKey = make([]byte, 32) }, true},
		{"test timings", func(c *Config) { c.Timings = TestTimings() }, true},
		{"join addrs", func(c *Config) { c.JoinAddrs = []string{"10.0.0.2:7703", "node-3"} }, true},
		{"missing node id", func(c *Config) { c.NodeID = "" }, false},
		{"node id with space", func(c *Config) { c.NodeID = "node 1" }, false},
		{"missing system id", func(c *Config) { c.SystemID = "" }, false},
		{"missing key", func(c *Config) { c.GossipKey = nil }, false},
		{"short key", func(c *Config) { c.GossipKey = make([]byte, 15) }, false},
		{"bind addr not an ip", func(c *Config) { c.BindAddr = "localhost" }, false},
		{"advertise addr not an ip", func(c *Config) { c.AdvertiseAddr = "node-1" }, false},
		{"bind port out of range", func(c *Config) { c.BindPort = 70000 }, false},
		{"advertise port negative", func(c *Config) { c.AdvertisePort = -1 }, false},
		{"empty join addr", func(c *Config) { c.JoinAddrs = []string{""} }, false},
		{"join addr with space", func(c *Config) { c.JoinAddrs = []string{"a b:1"} }, false},
		{"zero retry interval", func(c *Config) { c.JoinRetryInterval = 0 }, false},
		{"max backoff below interval", func(c *Config) { c.JoinMaxBackoff = c.JoinRetryInterval / 2 }, false},
		{"negative bootstrap expect", func(c *Config) { c.BootstrapExpect = -1 }, false},
		{"zero leave timeout", func(c *Config) { c.LeaveTimeout = 0 }, false},
		{"zero retention", func(c *Config) { c.DeadMemberRetention = 0 }, false},
		{"no role", func(c *Config) { c.Meta.Role = "" }, false},
		{"no raft addr", func(c *Config) { c.Meta.RaftAddr = "" }, false},
		{"bad grpc addr", func(c *Config) { c.Meta.GRPCAddr = "10.0.0.1" }, false},
		{"meta over 512 bytes", func(c *Config) {
			c.Meta.HTTPAddr, c.Meta.GRPCAddr, c.Meta.RaftAddr = longHost, longHost, longHost
		}, false},
		{"probe timeout not below interval", func(c *Config) { c.Timings.ProbeTimeout = c.Timings.ProbeInterval }, false},
		{"zero gossip interval", func(c *Config) { c.Timings.GossipInterval = 0 }, false},
		{"zero gossip nodes", func(c *Config) { c.Timings.GossipNodes = 0 }, false},
		{"zero settle", func(c *Config) { c.Timings.BootstrapSettle = 0 }, false},
		{"negative reclaim", func(c *Config) { c.Timings.DeadNodeReclaimTime = -time.Second }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if tc.ok && err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
			if _, nerr := New(cfg); (nerr == nil) != tc.ok {
				t.Fatalf("New error %v disagrees with Validate %v", nerr, err)
			}
		})
	}
}

func TestTimings_Apply(t *testing.T) {
	tt := TestTimings()
	mc := memberlist.DefaultLANConfig()
	tt.apply(mc)
	got := Timings{
		ProbeInterval: mc.ProbeInterval, ProbeTimeout: mc.ProbeTimeout,
		GossipInterval: mc.GossipInterval, GossipNodes: mc.GossipNodes,
		PushPullInterval: mc.PushPullInterval, TCPTimeout: mc.TCPTimeout,
		RetransmitMult: mc.RetransmitMult, SuspicionMult: mc.SuspicionMult,
		SuspicionMaxTimeoutMult: mc.SuspicionMaxTimeoutMult,
		GossipToTheDeadTime:     mc.GossipToTheDeadTime, DeadNodeReclaimTime: mc.DeadNodeReclaimTime,
		BootstrapSettle: tt.BootstrapSettle, // not a memberlist setting
	}
	if got != tt {
		t.Fatalf("apply lost a field:\n got %+v\nwant %+v", got, tt)
	}
	if err := LANTimings().validate(); err != nil {
		t.Fatalf("LAN timings invalid: %v", err)
	}
}

func TestMembership_MemberlistConfig(t *testing.T) {
	tests := []struct {
		name                 string
		bindPort, advPort    int
		key                  []byte
		wantAdvPort          int
		wantEncryptedKeyring bool
	}{
		{"advertise defaults to bind port", 7703, 0, testKey, 7703, true},
		{"explicit advertise port", 7703, 17703, testKey, 17703, true},
		{"plaintext", 7703, 0, nil, 7703, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.BindPort, cfg.AdvertisePort = tc.bindPort, tc.advPort
			cfg.GossipKey, cfg.AllowPlaintext = tc.key, tc.key == nil
			m, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			mc := m.memberlistConfig()
			if mc.Name != cfg.NodeID || mc.AdvertisePort != tc.wantAdvPort {
				t.Fatalf("name %q advertise port %d, want %q %d", mc.Name, mc.AdvertisePort, cfg.NodeID, tc.wantAdvPort)
			}
			if mc.EncryptionEnabled() != tc.wantEncryptedKeyring {
				t.Fatalf("encryption enabled = %v, want %v", mc.EncryptionEnabled(), tc.wantEncryptedKeyring)
			}
			if mc.Alive == nil || mc.Merge == nil || mc.Events == nil || mc.Delegate == nil {
				t.Fatal("filters and event delegate must be installed")
			}
		})
	}
}
