package clustertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/client/agentbridge"
)

// Browser tests of the web console (issue 15): a real headless Chromium
// drives the console served by a real 3-node cluster. Screenshots of each
// page at two widths go to console/screenshots/ (git-ignored).

// consoleThink is the agents' think time in the browser tests: long enough
// that the console sees a run's rounds progress, short enough to keep the
// test quick.
const consoleThink = 400 * time.Millisecond

// consoleWait bounds one wait for the page to show something.
var consoleWait = scaled(20 * time.Second)

// resultRow is one claim of a finished run: id, claim status, resolution.
type resultRow [3]string

// TestConsole_Browser drives the console in Chromium against a 3-node
// cluster, opened on the leader: the System page lists the three nodes
// and the leader; a debate started from the console appears and its rounds
// update live; the finished result shows the claims and statuses of
// result.json; then the leader (the node the page came from) is killed and
// the page, without a reload, shows the new leader, keeps following runs
// over its resumed MAP session and cancels one.
func TestConsole_Browser(t *testing.T) {
	b := newBrowser(t)
	c := New(t, 3)
	leader := c.Leader(t)
	// carol asks, in the first debate round, to merge bob's risk claim
	// into alice's: the console must show the merge.
	merge := consensus.Answer{Output: json.RawMessage(`{"fullResponse": "Both risks are the same risk.",
		"summary": "bob's and alice's risks are one claim",
		"judgements": [{"claimId": "bob:0:1", "stance": "agree", "confidence": 0.9,
			"rationale": "the same risk as alice's", "mergesWith": "alice:0:1"}]}`)}
	script := personaScript(map[string]map[string]consensus.Answer{"carol": {"debate:1": merge}})
	startRunAgents(t, c, runParticipants, []int{0, 1, 2},
		agentbridge.WithThinkTime(agentbridge.NewScriptHandler(script), consoleThink))
	// One more agent, in a scope, for the directory's filters.
	dave := agentOn(t, c, 1, "dave", map[string]any{"role": "reviewer"})
	writeRetry(t, dave, "map/scopes/create", map[string]any{"scopeId": "reviewers", "name": "Reviewers"})
	writeRetry(t, dave, "map/scopes/join", map[string]any{"scopeId": "reviewers", "agentId": "dave"})

	// The console sees every agent and message only as a system
	// participant (MAP visibility): give it an operator's token the way
	// its credential form stores one, then load it.
	b.open("https://" + leader.HTTPAddr + "/ui/") // TLS, as every harness node
	cred, _ := json.Marshal(map[string]string{"method": "bearer", "token": c.Token(), "participantType": "system"})
	b.eval(fmt.Sprintf(`sessionStorage.setItem('concord.console.auth', %q); true`, cred))
	b.open("https://" + leader.HTTPAddr + "/ui/")
	consoleSystem(t, b, leader)
	consoleAgents(t, b, leader)
	runID := consoleStartDebate(t, b)
	consoleFollowDebate(t, b, c, runID)
	consoleFailover(t, b, c, leader, runID)
	b.requireNoPageErrors()
	var opened float64
	b.eval(`window.__opened || 0`, &opened)
	if opened == 0 {
		t.Fatal("the console page was reloaded")
	}
}

// consoleSystem: the System page lists three nodes and names the leader,
// says the system has no federation links, and the page links are reachable by keyboard.
func consoleSystem(t *testing.T, b *browser, leader *Node) {
	t.Helper()
	b.waitFor("three servers listed", `document.querySelectorAll('#servers tbody tr[data-node]').length === 3`, consoleWait)
	b.waitFor("leader "+leader.ID+" shown", fmt.Sprintf(`document.querySelector('#leader')?.dataset.leader === %q`, leader.ID), consoleWait)
	b.waitFor("leader row marked", fmt.Sprintf(`document.querySelector('#servers tr[data-node=%q]')?.dataset.role === 'leader'`, leader.ID), consoleWait)
	b.waitFor("no federation links", `document.querySelector('#fed-links td.empty')?.textContent === 'No federation links.'`, consoleWait)
	b.requireAccessible("system")
	b.shoot("system")

	// Keyboard: the skip link comes first, then the page links; Enter on
	// one opens its page.
	b.eval(`document.activeElement && document.activeElement.blur(); true`)
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent("\t\t\t")); err != nil {
		t.Fatal(err)
	}
	if got := b.text(":focus"); got != "Agents and scopes" {
		t.Fatalf("third Tab focuses %q, want the Agents and scopes link", got)
	}
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent("\r")); err != nil {
		t.Fatal(err)
	}
	b.waitFor("agents page opened by keyboard", `location.hash === '#/agents'`, consoleWait)
}

// consoleAgents: the directory lists the agents with their home nodes,
// the scope, and filters by scope and by text.
func consoleAgents(t *testing.T, b *browser, leader *Node) {
	t.Helper()
	for _, id := range runParticipants {
		b.waitFor("agent "+id+" listed", fmt.Sprintf(`document.querySelector('#agents tr[data-agent=%q]')`, id), consoleWait)
	}
	home, _ := leader.Server().Registry().Agent("alice")
	b.waitFor("alice's home node "+home.HomeNode+" shown", fmt.Sprintf(`document.querySelector('#agents tr[data-agent="alice"] td:nth-child(5)')?.textContent === %q`, home.HomeNode), consoleWait)
	b.waitFor("scope listed", `document.querySelector('#scopes tbody th')?.textContent === 'reviewers'`, consoleWait)
	b.eval(`(() => { const s = document.getElementById('agent-scope'); s.value = 'reviewers'; s.dispatchEvent(new Event('input')); return true })()`)
	b.waitFor("scope filter keeps only dave", `[...document.querySelectorAll('#agents tr[data-agent]')].map((r) => r.dataset.agent).join() === 'dave'`, consoleWait)
	b.eval(`(() => { const s = document.getElementById('agent-scope'); s.value = ''; s.dispatchEvent(new Event('input'));
		const q = document.getElementById('agent-q'); q.value = 'bo'; q.dispatchEvent(new Event('input')); return true })()`)
	b.waitFor("search keeps only bob", `[...document.querySelectorAll('#agents tr[data-agent]')].map((r) => r.dataset.agent).join() === 'bob'`, consoleWait)
	b.eval(`(() => { const q = document.getElementById('agent-q'); q.value = ''; q.dispatchEvent(new Event('input')); return true })()`)
	b.requireAccessible("agents")
	b.shoot("agents")
}

// consoleStartDebate starts a debate from the form and returns its run id:
// first a form the console refuses itself, then one the node refuses (its
// field error is shown), then a good one.
func consoleStartDebate(t *testing.T, b *browser) string {
	t.Helper()
	b.goTo("#/debates")
	for _, id := range runParticipants {
		b.waitFor("checkbox for "+id, fmt.Sprintf(`document.getElementById('start-agent-%s')`, id), consoleWait)
	}
	b.requireAccessible("debates")
	b.shoot("debates")
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#start-submit"))); err != nil {
		t.Fatal(err)
	}
	b.waitFor("empty form refused", `/task is empty; choose at least two agents/.test(document.getElementById('start-msg').textContent)`, consoleWait)
	b.eval(`document.getElementById('start-min').value = '3'; document.getElementById('start-max').value = '1'; true`)
	if err := chromedp.Do(b.ctx,
		chromedp.SendKeys(chromedp.CSS("#start-task"), "Should the session cache be sharded across regions?"),
		chromedp.Click(chromedp.CSS("#start-agent-alice")),
		chromedp.Click(chromedp.CSS("#start-agent-bob")),
		chromedp.Click(chromedp.CSS("#start-agent-carol")),
		chromedp.Click(chromedp.CSS("#start-submit")),
	); err != nil {
		t.Fatalf("fill the start form: %v", err)
	}
	b.waitFor("node's field error shown", `/request\.roundPolicy\.maxRounds: must be greater/.test(document.getElementById('start-msg').textContent)`, consoleWait)
	b.eval(`document.getElementById('start-min').value = '1'; document.getElementById('start-max').value = '2'; true`)
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#start-submit"))); err != nil {
		t.Fatal(err)
	}
	b.waitFor("run page opened", `location.hash.startsWith('#/debates/')`, consoleWait)
	var hash string
	b.eval(`location.hash`, &hash)
	runID := strings.TrimPrefix(hash, "#/debates/")
	t.Logf("console started run %s", runID)
	return runID
}

// consoleFollowDebate: while the run is running the page shows its rounds
// and answers growing (without a reload); the merge appears; the finished
// result shows the claims and statuses of result.json; the files are
// argue's; the task messages show in the recent messages.
func consoleFollowDebate(t *testing.T, b *browser, c *Cluster, runID string) {
	t.Helper()
	seen := watchRun(t, b)
	t.Logf("states of the running debate the console showed: %q", seen)
	if len(seen) < 3 {
		t.Fatalf("console showed %d distinct states of the running debate (%q); want the rounds to update live", len(seen), seen)
	}
	b.waitFor("run finished", `document.querySelector('#run-status')?.dataset.status === 'finished'`, runDoneTimeout)
	b.waitFor("the merge shown in the live claims", `[...document.querySelectorAll('#run-live tr[data-claim][data-status="merged"]')].length === 1`, consoleWait)
	b.waitFor("result shown", `document.querySelectorAll('#result tr[data-claim]').length > 0`, consoleWait)
	b.requireAccessible("run")
	b.shoot("run-result")
	b.shootViewport("readme", "body", 1100, 760) // the README's picture (node/console/console.png)

	want := resultFileRows(t, c, runID)
	var got []resultRow
	b.eval(`[...document.querySelectorAll('#result tr[data-claim]')].map((tr) => [tr.dataset.claim, tr.dataset.status, tr.dataset.resolution])`, &got)
	if !slices.Equal(got, want) {
		t.Fatalf("console result claims = %q, result.json = %q", got, want)
	}
	// The live view rebuilt the claim catalog from the events alone: it
	// must name the engine's claims and merges.
	var live [][2]string
	b.eval(`[...document.querySelectorAll('#run-live tr[data-claim]')].map((tr) => [tr.dataset.claim, tr.dataset.status]).sort()`, &live)
	wantLive := make([][2]string, 0, len(want))
	for _, r := range want {
		wantLive = append(wantLive, [2]string{r[0], r[1]})
	}
	slices.SortFunc(wantLive, func(x, y [2]string) int { return strings.Compare(x[0], y[0]) })
	if !slices.Equal(live, wantLive) {
		t.Fatalf("console live claims = %q, result.json = %q", live, wantLive)
	}
	var href string
	b.eval(`document.getElementById('file-result-json')?.href || ''`, &href)
	if !strings.HasSuffix(href, "/v1/runs/"+runID+"/result.json") {
		t.Fatalf("result.json link = %q", href)
	}
	requireArgueFiles(t, c, runID)

	// The debate's task messages went through the node the console is on.
	b.goTo("#/agents")
	b.waitFor("recent messages listed", `document.querySelectorAll('#messages tbody tr td').length > 1`, consoleWait)
	b.waitFor("alice's recent messages counted", `Number(document.querySelector('#agents tr[data-agent="alice"] td:nth-child(7)')?.textContent) > 0`, consoleWait)
	b.shoot("agents-after")
}

// consoleFailover kills the leader, which served the page: the page shows
// the new leader without a reload, its MAP session moves to a survivor,
// and its resumed subscriptions keep the runs list live: a run started
// elsewhere appears, and the console cancels it (it waits for an agent
// that never answers, so it is still running).
func consoleFailover(t *testing.T, b *browser, c *Cluster, leader *Node, runID string) {
	t.Helper()
	b.goTo("#/system")
	b.waitFor("system page back", `document.querySelector('#leader')`, consoleWait)
	c.Kill(t, leader.Index)
	t0 := time.Now()
	b.waitFor("a new leader shown", fmt.Sprintf(`(() => { const l = document.querySelector('#leader')?.dataset.leader; return l && l !== %q })()`, leader.ID), consoleWait)
	newLeader := c.Leader(t)
	b.waitFor("new leader "+newLeader.ID+" shown", fmt.Sprintf(`document.querySelector('#leader')?.dataset.leader === %q`, newLeader.ID), consoleWait)
	t.Logf("console showed the new leader %s %v after the kill", newLeader.ID, time.Since(t0).Round(time.Millisecond))
	b.waitFor("MAP session moved", fmt.Sprintf(`(() => { const c = document.getElementById('conn').dataset; return c.state === 'open' && c.node && c.node !== %q })()`, leader.ID), consoleWait)
	b.waitFor("killed node shown down", fmt.Sprintf(`document.querySelector('#servers tr[data-node=%q]')?.classList.contains('dead')`, leader.ID), consoleWait)
	b.shoot("system-failover")

	b.goTo("#/debates")
	b.waitFor("first run listed after failover", fmt.Sprintf(`document.querySelector('#runs tr[data-run=%q]')`, runID), consoleWait)
	agentOn(t, c, c.Running()[0].Index, "mute", nil)
	requireAgentsEverywhere(t, c, "mute")
	var survivors []string
	for _, n := range c.Running() {
		survivors = append(survivors, n.MAPURL())
	}
	raw := json.RawMessage(`{"requestId":"to-cancel","task":"Wait for an agent that never answers",
		"participants":[{"id":"alice"},{"id":"mute"}],"roundPolicy":{"minRounds":1,"maxRounds":1},
		"waitingPolicy":{"perTaskTimeoutMs":600000,"perRoundTimeoutMs":600000}}`)
	req, err := consensus.ParseRequest(raw)
	if err != nil {
		t.Fatal(err)
	}
	obs := newRunsObserver(t, survivors)
	second := obs.start(t, runRequest{id: "to-cancel", raw: raw, req: req})
	b.waitFor("run started after failover listed live", fmt.Sprintf(`document.querySelector('#runs tr[data-run=%q]')?.dataset.status === 'running'`, second), consoleWait)
	b.requireAccessible("debates")
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#cancel-"+second))); err != nil {
		t.Fatalf("click cancel: %v", err)
	}
	b.waitFor("run cancelled from the console", fmt.Sprintf(`document.querySelector('#runs tr[data-run=%q]')?.dataset.status === 'cancelled'`, second), consoleWait)
	if info, err := obs.get(second); err != nil || info.Status != "cancelled" {
		t.Fatalf("run %s after the console's cancel: %+v, %v", second, info, err)
	}
	b.shoot("debates-after")

	// The cancelled run's page says why it ended and offers the files a
	// cancelled run has: events.jsonl and summary.md, no result.json.
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#runs tr[data-run=%q] a`, second)))); err != nil {
		t.Fatalf("open the cancelled run: %v", err)
	}
	b.waitFor("cancelled run shown", `document.querySelector('#run-status')?.dataset.status === 'cancelled'`, consoleWait)
	b.waitFor("cancellation reason shown", `/Cancelled: Run cancelled: cancelled from the console/.test(document.getElementById('run-head').textContent)`, consoleWait)
	var files []string
	b.eval(`[...document.querySelectorAll('#run-head .downloads a')].map((a) => a.textContent)`, &files)
	if !slices.Equal(files, []string{"events.jsonl", "summary.md"}) {
		t.Fatalf("cancelled run offers %q, want events.jsonl and summary.md", files)
	}
	if summary := string(runFile(t, c, second, "summary.md")); !strings.Contains(summary, "Cancelled") {
		t.Fatalf("summary.md of the cancelled run = %q", summary)
	}
	b.requireAccessible("cancelled run")
	b.shoot("run-cancelled")
}

// requireArgueFiles checks the run's events.jsonl (one argue.event line per
// engine event, in order, ending with Finalized) and summary.md.
func requireArgueFiles(t *testing.T, c *Cluster, runID string) {
	t.Helper()
	events := strings.Split(strings.TrimSpace(string(runFile(t, c, runID, "events.jsonl"))), "\n")
	for i, line := range events {
		var l struct {
			Kind  string `json:"kind"`
			Seq   int    `json:"seq"`
			Event struct {
				SessionID string `json:"sessionId"`
				Type      string `json:"type"`
			} `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Kind != "argue.event" || l.Seq != i || l.Event.SessionID != runID {
			t.Fatalf("events.jsonl line %d = %s (%v)", i, line, err)
		}
		if i == len(events)-1 && l.Event.Type != "Finalized" {
			t.Fatalf("events.jsonl ends with %s, want Finalized", l.Event.Type)
		}
	}
	if summary := string(runFile(t, c, runID, "summary.md")); !strings.Contains(summary, "**Status:**") {
		t.Fatalf("summary.md = %q", summary)
	}
}

// watchRun samples the run page until the run is over and returns the
// distinct progress states it saw while the run was running (rounds shown
// and answers per round).
func watchRun(t *testing.T, b *browser) []string {
	t.Helper()
	var seen []string
	shot := false
	deadline := time.Now().Add(runDoneTimeout)
	for time.Now().Before(deadline) {
		var st struct {
			Status string `json:"status"`
			Sig    string `json:"sig"`
		}
		b.eval(`({status: document.querySelector('#run-status')?.dataset.status || '',
			sig: [...document.querySelectorAll('#run-live .round')].map((r) => r.dataset.round + '=' + r.dataset.answered + (r.dataset.done === 'true' ? '!' : '')).join(' ')})`, &st)
		if st.Status != "" && st.Status != "running" {
			return seen
		}
		if st.Status == "running" && st.Sig != "" && (len(seen) == 0 || seen[len(seen)-1] != st.Sig) {
			seen = append(seen, st.Sig)
			if !shot && strings.Contains(st.Sig, "!") {
				b.shoot("run-live")
				shot = true
			}
		}
		time.Sleep(50 * time.Millisecond) // sampling interval of the page's state
	}
	t.Fatalf("run did not end within %v; states seen: %q", runDoneTimeout, seen)
	return nil
}

// resultFileRows reads the run's result.json from a running node's /v1 and
// returns its claims as the console lists them: id, status, resolution.
func resultFileRows(t *testing.T, c *Cluster, runID string) []resultRow {
	t.Helper()
	body := runFile(t, c, runID, "result.json")
	var res struct {
		FinalClaims []struct {
			ClaimID string `json:"claimId"`
			Status  string `json:"status"`
		} `json:"finalClaims"`
		ClaimResolutions []struct {
			ClaimID string `json:"claimId"`
			Status  string `json:"status"`
		} `json:"claimResolutions"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatalf("decode result.json: %v", err)
	}
	resolution := map[string]string{}
	for _, r := range res.ClaimResolutions {
		resolution[r.ClaimID] = r.Status
	}
	rows := make([]resultRow, 0, len(res.FinalClaims))
	for _, fc := range res.FinalClaims {
		rows = append(rows, resultRow{fc.ClaimID, fc.Status, resolution[fc.ClaimID]})
	}
	if len(rows) == 0 {
		t.Fatalf("result.json has no claims: %s", body)
	}
	return rows
}

// runFile GETs one of a run's files from a running node's /v1.
func runFile(t *testing.T, c *Cluster, runID, name string) []byte {
	t.Helper()
	url := "https://" + c.Running()[0].HTTPAddr + "/v1/runs/" + runID + "/" + name
	web := &http.Client{Timeout: CallTimeout, Transport: &http.Transport{TLSClientConfig: ClientTLS(), DisableKeepAlives: true}}
	return getOK(t, web, url)
}

// getOK GETs url and returns its body; anything but 200 fails t.
func getOK(t *testing.T, web *http.Client, url string) []byte {
	t.Helper()
	resp, err := web.Get(url)
	if err != nil {
		t.Fatalf("get %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("get %s: %d %s %v", url, resp.StatusCode, body, err)
	}
	return body
}
