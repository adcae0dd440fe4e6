// Shared check harness of the SDK interop scripts: one PASS/FAIL/SKIP line
// per check, a closing "N passed, N failed, N skipped" line, a global
// deadline, and an Inbox to wait for pushed items.
import { inspect } from "node:util";
import WS from "ws";

// Node 20 has no global WebSocket; the SDK's factories and websocketStream
// use the global class, so install the `ws` implementation (text frames come
// back as strings, as the SDK's JSON.parse expects).
if (typeof globalThis.WebSocket === "undefined") globalThis.WebSocket = WS;

export const STEP_MS = 5000; // one wait for a response, message or event
const CHECK_MS = 10000; // one whole check

const counts = { passed: 0, failed: 0, skipped: 0 };
const t0 = Date.now();
const elapsed = () => `${((Date.now() - t0) / 1000).toFixed(2)}s`;
let current = "start";

export function pass(name, detail = "") {
  counts.passed++;
  console.log(`PASS ${name}${detail ? ` (${detail})` : ""}`);
}
export function fail(name, detail) {
  counts.failed++;
  console.log(`FAIL ${name}: ${detail}`);
}
export function skip(name, why) {
  counts.skipped++;
  console.log(`SKIP ${name}: ${why}`);
}
export function summary() {
  console.log(`${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped`);
}
export const failures = () => counts.failed;
export const show = (v) => inspect(v, { depth: 6, breakLength: Infinity, maxStringLength: 200 });

// Expectation marks a failed assertion: reported by message only, while an
// unexpected exception keeps its stack.
export class Expectation extends Error {}
export const errText = (e) =>
  e instanceof Expectation
    ? e.message
    : e && typeof e === "object" && "code" in e
      ? `error ${e.code} ${e.message}${e.data ? " " + show(e.data) : ""}`
      : String(e?.stack || e);

// deadline ends a hung run with status 2 after totalMs.
export function deadline(totalMs) {
  return setTimeout(() => {
    fail("overall", `timed out after ${totalMs} ms during "${current}"`);
    summary();
    process.exit(2);
  }, totalMs);
}

// check runs one named step; a thrown error or a returned string is a FAIL.
// It returns true when the step passed so dependent steps can be skipped.
export async function check(name, fn) {
  current = name;
  let timer;
  const stepLimit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Expectation(`step took longer than ${CHECK_MS} ms`)), CHECK_MS);
  });
  try {
    const detail = await Promise.race([fn(), stepLimit]);
    pass(name, `${typeof detail === "string" ? detail + ", " : ""}${elapsed()}`);
    return true;
  } catch (e) {
    fail(name, errText(e));
    return false;
  } finally {
    clearTimeout(timer);
  }
}
export function expect(cond, what) {
  if (!cond) throw new Expectation(what);
}

// Inbox collects items pushed by a callback and lets a step wait for the
// first one matching a predicate, with a timeout.
export class Inbox {
  items = [];
  #waiters = [];
  push(item) {
    this.items.push(item);
    for (const w of [...this.#waiters]) {
      if (w.pred(item)) {
        this.#waiters.splice(this.#waiters.indexOf(w), 1);
        clearTimeout(w.timer);
        w.resolve(item);
      }
    }
  }
  next(pred, what, ms = STEP_MS) {
    const hit = this.items.find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve, reject) => {
      const w = { pred, resolve };
      w.timer = setTimeout(() => {
        this.#waiters.splice(this.#waiters.indexOf(w), 1);
        reject(new Expectation(`no ${what} within ${ms} ms; got ${this.items.length}: ${show(this.items.slice(-5))}`));
      }, ms);
      this.#waiters.push(w);
    });
  }
}

// tapSocket pushes every inbound JSON-RPC object of a WebSocket to tap.
export function tapSocket(ws, tap) {
  ws.addEventListener("message", (ev) => {
    try {
      tap.push(JSON.parse(ev.data));
    } catch {
      tap.push({ unparsable: String(ev.data) });
    }
  });
}
