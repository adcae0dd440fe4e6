package mapsvc

import (
	"testing"

	"github.com/concordmap/concord/node/router"
)

// The concrete collaborators satisfy the interfaces declared here.
var (
	_ Router               = (*router.Router)(nil)
	_ router.LocalSessions = (*Sessions)(nil)
)

func TestConfig_SharedSessions(t *testing.T) {
	shared := NewSessions()
	e := newEnv(t, func(c *Config) {
		c.Sessions = shared
		c.System = SystemInfo{Name: "sys", Version: "1.2"}
	})
	c := e.dial()
	res := connectAs(c, TypeClient, nil)
	if _, ok := shared.Conn(res["sessionId"].(string)); !ok || e.svc.Sessions() != shared {
		t.Fatal("the shared session table is not the service's")
	}
	if si := res["systemInfo"].(map[string]any); si["name"] != "sys" || si["version"] != "1.2" {
		t.Fatalf("systemInfo %v", si)
	}
}
