package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The browser the console tests drive: headless Chromium through chromedp,
// with waits, screenshots and page checks.

// consoleScreenshotDir is where the browser tests write their screenshots.
const consoleScreenshotDir = "console/screenshots"

// consoleWidths are the two widths every page is photographed at: a laptop
// and a narrow window.
var consoleWidths = []int64{1280, 800}

// findChromium returns the browser binary, or skips the test saying why.
// CONCORD_CHROMIUM overrides the search. CI sets CONCORD_REQUIRE_BROWSER
// (.ci/run installs chromium), so there a missing browser fails instead.
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
	const msg = "no chromium on PATH (apt-get install chromium; .ci/run installs it)"
	if os.Getenv("CONCORD_REQUIRE_BROWSER") != "" {
		t.Fatal(msg + ", and CONCORD_REQUIRE_BROWSER is set")
	}
	t.Skip(msg + ": browser tests skipped")
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
		// The harness's nodes serve TLS with a throwaway test CA the
		// browser does not know.
		chromedp.Flag("ignore-certificate-errors", true),
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
