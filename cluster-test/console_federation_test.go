package clustertest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestConsole_BrowserFederation: the System page of a system with no
// links says so; once it is linked to another system the link's row
// appears, live, with its state up. GET /v1/federation/links, which the
// page reads, lists the link with its policies and no secret material.
func TestConsole_BrowserFederation(t *testing.T) {
	b := newBrowser(t)
	net := NewNetwork(t, nil)
	dc1 := New(t, 1, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 := New(t, 1, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())

	b.open("http://" + dc1.Node(0).HTTPAddr + "/ui/")
	b.waitFor("no federation links", `document.querySelector('#fed-links td.empty')?.textContent === 'No federation links.'`, consoleWait)

	Link(t, dc1, dc2, LinkSpec{ToExport: exportAll})
	b.waitFor("link to dc2 up", `document.querySelector('#fed-links tr[data-peer="dc2"]')?.dataset.state === 'up'`, consoleWait)
	if got := b.text(`#fed-links tr[data-peer="dc2"] th`); got != "dc2" {
		t.Fatalf("link row header = %q, want dc2", got)
	}
	b.requireAccessible("system")
	b.shoot("system-federation")
	b.requireNoPageErrors()

	var res struct {
		SystemID string `json:"systemId"`
		Links    []struct {
			PeerSystemID string `json:"peerSystemId"`
			State        string `json:"state"`
			StreamsUp    uint32 `json:"streamsUp"`
			Export       string `json:"export"`
			Import       string `json:"import"`
			Initiator    bool   `json:"initiator"`
		} `json:"links"`
	}
	body := getJSON(t, "http://"+dc1.Node(0).HTTPAddr+"/v1/federation/links", &res)
	if res.SystemID != "dc1" || len(res.Links) != 1 {
		t.Fatalf("dc1's links: %s", body)
	}
	l := res.Links[0]
	if l.PeerSystemID != "dc2" || l.State != "up" || l.StreamsUp == 0 || l.Export != "none" || l.Import != "all" || !l.Initiator {
		t.Fatalf("dc1's link to dc2: %+v, want up, export none, import all, initiator", l)
	}
	for _, secret := range []string{"secret", "token", "Pem", "BEGIN"} {
		if strings.Contains(string(body), secret) {
			t.Fatalf("GET /v1/federation/links shows %q: %s", secret, body)
		}
	}
}

// getJSON GETs url over plain HTTP and decodes its 200 body into v.
func getJSON(t *testing.T, url string, v any) []byte {
	t.Helper()
	body := getOK(t, &http.Client{Timeout: CallTimeout}, url)
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("decode %s: %v: %s", url, err, body)
	}
	return body
}
