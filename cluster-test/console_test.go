package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// consoleScreenshotDir is where the browser tests write their screenshots.
const consoleScreenshotDir = "console/screenshots"

// consoleWidths are the two widths every page is photographed at: a laptop
// and a narrow window.
var consoleWidths = []int64{1280, 800}

// consoleThink is the agents' think time in the browser tests: long enough
// that the console sees a run's rounds progress, short enough to keep the
// test quick.
const consoleThink = 400 * time.Millisecond

// consoleWait bounds one wait for the page to show something.
var consoleWait = scaled(20 * time.Second)

// findChromium returns the browser binary, or skips the test saying why.
// CONCORD_CHROMIUM overrides the search.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONCORD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (apt-get install chromium; .ci/run installs it): browser tests skipped")
	return ""
}

// browser is one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// newBrowser starts Chromium with a fresh profile; the test's cleanup
// closes it.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := findChromium(t)
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		_ = chromedp.Cancel(cctx)
		cancel()
		allocCancel()
	})
	// Start the browser now, so a broken install fails here, clearly.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return &browser{t: t, ctx: ctx}
}

// open loads url and installs a recorder of uncaught page errors.
func (b *browser) open(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
	b.eval(`window.__errs = []; window.__opened = Date.now();
		addEventListener('error', (e) => __errs.push(String(e.message)));
		addEventListener('unhandledrejection', (e) => __errs.push(String(e.reason)));
		true`)
}

// eval runs a JavaScript expression and decodes its value into out (nil:
// ignore the value).
func (b *browser) eval(expr string, out ...any) {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %q: %v", expr, err)
	}
	if len(out) > 0 {
		if err := json.Unmarshal(v, out[0]); err != nil {
			b.t.Fatalf("decode %q = %s: %v", expr, v, err)
		}
	}
}

// waitFor polls a JavaScript expression until it is truthy; what names the
// condition in the failure.
func (b *browser) waitFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	var last string
	err := Poll(b.ctx, timeout, func() error {
		v, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](`!!(`+expr+`)`))
		if err != nil {
			last = err.Error()
			return err
		}
		if string(v) != "true" {
			last = "not yet"
			return fmt.Errorf("%s: not yet", what)
		}
		return nil
	})
	if err != nil {
		b.t.Fatalf("console: %s within %v: %v (%s)", what, timeout, err, last)
	}
}

// text returns the text of the first element matching the CSS selector
// ("" when there is none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	var s string
	b.eval(fmt.Sprintf(`(document.querySelector(%q) || {textContent: ''}).textContent`, sel), &s)
	return s
}

// go navigates inside the single-page console (no reload).
func (b *browser) goTo(hash string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`location.hash = %q; true`, hash))
}

// shoot writes a full-page screenshot of the current page at every width.
func (b *browser) shoot(name string) {
	b.t.Helper()
	if err := os.MkdirAll(consoleScreenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	for _, w := range consoleWidths {
		png, err := func() ([]byte, error) {
			if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(w, 900)); err != nil {
				return nil, err
			}
			// Give the layout a frame at the new width.
			b.eval(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`)
			return chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
		}()
		if err != nil {
			b.t.Fatalf("screenshot %s at %d px: %v", name, w, err)
		}
		file := filepath.Join(consoleScreenshotDir, fmt.Sprintf("%s-%d.png", name, w))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(consoleWidths[0], 900)); err != nil {
		b.t.Fatal(err)
	}
}

// shootViewport writes what a w×h window shows with sel at its top.
func (b *browser) shootViewport(name, sel string, w, h int64) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(w, h)); err != nil {
		b.t.Fatal(err)
	}
	b.eval(fmt.Sprintf(`document.querySelector(%q).scrollIntoView(); new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, sel))
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(consoleScreenshotDir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(consoleWidths[0], 900)); err != nil {
		b.t.Fatal(err)
	}
}

// requireAccessible checks the current page for the basics a screen
// reader and a keyboard need: one h1 and a page heading, every form
// control labelled, every button and link named, column headers scoped,
// ids unique.
func (b *browser) requireAccessible(page string) {
	b.t.Helper()
	var problems []string
	b.eval(`(() => {
		const p = [];
		const short = (el) => el.outerHTML.slice(0, 90);
		if (document.querySelectorAll('h1').length !== 1) p.push('want exactly one h1');
		if (!document.querySelector('main h2')) p.push('no page heading (h2) in main');
		for (const el of document.querySelectorAll('input, select, textarea'))
			if (!el.labels || el.labels.length === 0) p.push('unlabelled ' + short(el));
		for (const el of document.querySelectorAll('button, a[href]'))
			if (!(el.textContent.trim() || el.getAttribute('aria-label'))) p.push('nameless ' + short(el));
		for (const th of document.querySelectorAll('thead th'))
			if (th.getAttribute('scope') !== 'col') p.push('column header without scope ' + short(th));
		const ids = [...document.querySelectorAll('[id]')].map((e) => e.id);
		for (const id of new Set(ids)) if (ids.indexOf(id) !== ids.lastIndexOf(id)) p.push('duplicate id ' + id);
		return p;
	})()`, &problems)
	if len(problems) > 0 {
		b.t.Fatalf("console %s page: accessibility problems: %q", page, problems)
	}
}

// requireNoPageErrors fails on any uncaught error the page recorded.
func (b *browser) requireNoPageErrors() {
	b.t.Helper()
	var errs []string
	b.eval(`window.__errs || ['page was reloaded: the error recorder is gone']`, &errs)
	if len(errs) > 0 {
		b.t.Fatalf("console page errors: %q", errs)
	}
}

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

	b.open("http://" + leader.HTTPAddr + "/ui/")

	// System: three nodes, the leader named.
	b.waitFor("three servers listed", `document.querySelectorAll('#servers tbody tr[data-node]').length === 3`, consoleWait)
	b.waitFor("leader "+leader.ID+" shown", fmt.Sprintf(`document.querySelector('#leader')?.dataset.leader === %q`, leader.ID), consoleWait)
	b.waitFor("leader row marked", fmt.Sprintf(`document.querySelector('#servers tr[data-node=%q]')?.dataset.role === 'leader'`, leader.ID), consoleWait)
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

	// Agents: the three debaters, with their home nodes.
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

	// Debates: start one from the form.
	b.goTo("#/debates")
	for _, id := range runParticipants {
		b.waitFor("checkbox for "+id, fmt.Sprintf(`document.getElementById('start-agent-%s')`, id), consoleWait)
	}
	b.requireAccessible("debates")
	b.shoot("debates")
	// A form the console refuses itself, then one the node refuses (the
	// field error is shown), then a good one.
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

	// Live: while the run is running, the page shows rounds and answers
	// growing, without a reload.
	seen := watchRun(t, b)
	if len(seen) < 3 {
		t.Fatalf("console showed %d distinct states of the running debate (%q); want the rounds to update live", len(seen), seen)
	}
	b.waitFor("run finished", `document.querySelector('#run-status')?.dataset.status === 'finished'`, runDoneTimeout)
	b.waitFor("the merge shown in the live claims", `[...document.querySelectorAll('#run-live tr[data-claim][data-status="merged"]')].length === 1`, consoleWait)
	b.waitFor("result shown", `document.querySelectorAll('#result tr[data-claim]').length > 0`, consoleWait)
	b.requireAccessible("run")
	b.shoot("run-result")
	b.shootViewport("readme", "body", 1100, 760) // the README's picture (node/console/console.png)

	// The result on the page is result.json's.
	want := resultFileRows(t, c, runID)
	var got []resultRow
	b.eval(`[...document.querySelectorAll('#result tr[data-claim]')].map((tr) => [tr.dataset.claim, tr.dataset.status, tr.dataset.resolution])`, &got)
	if !slices.Equal(got, want) {
		t.Fatalf("console result claims = %q, result.json = %q", got, want)
	}
	var href string
	b.eval(`document.getElementById('file-result-json')?.href || ''`, &href)
	if !strings.HasSuffix(href, "/v1/runs/"+runID+"/result.json") {
		t.Fatalf("result.json link = %q", href)
	}
	// The other two files are argue's too: one event line per engine
	// event, and the summary naming the result's status.
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

	// The debate's task messages went through the node the console is on.
	b.goTo("#/agents")
	b.waitFor("recent messages listed", `document.querySelectorAll('#messages tbody tr td').length > 1`, consoleWait)
	b.shoot("agents-after")

	// Failover: kill the leader, which served the page.
	b.goTo("#/system")
	b.waitFor("system page back", `document.querySelector('#leader')`, consoleWait)
	killed := leader
	c.Kill(t, killed.Index)
	t0 := time.Now()
	b.waitFor("a new leader shown", fmt.Sprintf(`(() => { const l = document.querySelector('#leader')?.dataset.leader; return l && l !== %q })()`, killed.ID), consoleWait)
	newLeader := c.Leader(t)
	b.waitFor("new leader "+newLeader.ID+" shown", fmt.Sprintf(`document.querySelector('#leader')?.dataset.leader === %q`, newLeader.ID), consoleWait)
	t.Logf("console showed the new leader %s %v after the kill", newLeader.ID, time.Since(t0).Round(time.Millisecond))
	b.waitFor("MAP session moved", fmt.Sprintf(`(() => { const c = document.getElementById('conn').dataset; return c.state === 'open' && c.node && c.node !== %q })()`, killed.ID), consoleWait)
	b.waitFor("killed node shown down", fmt.Sprintf(`document.querySelector('#servers tr[data-node=%q]')?.classList.contains('dead')`, killed.ID), consoleWait)
	b.shoot("system-failover")

	// The resumed subscriptions keep the runs list live: a run started
	// elsewhere appears without any reload. It waits for an agent that
	// never answers, so it is still running when the console cancels it.
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
	b.requireNoPageErrors()
	var opened float64
	b.eval(`window.__opened || 0`, &opened)
	if opened == 0 {
		t.Fatal("the console page was reloaded")
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
	url := "http://" + c.Running()[0].HTTPAddr + "/v1/runs/" + runID + "/" + name
	resp, err := http.Get(url)
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
