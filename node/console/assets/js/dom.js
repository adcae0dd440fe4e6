// Small DOM helpers: build elements without innerHTML (every value the
// console shows comes from the network and is inserted as text).

// h(tag, attrs, ...children) creates an element. attrs keys: "class",
// "text", "on<event>" (listener), anything else is an attribute (boolean
// true = present, false/null/undefined = absent). Children may be nodes,
// strings, numbers, arrays or null.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = String(v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// replace swaps container's children for nodes, keeping keyboard focus on
// the element with the same id (re-rendering must not throw the user's
// focus back to the top of the page).
export function replace(container, ...nodes) {
  const active = document.activeElement;
  const focusId = active && container.contains(active) ? active.id : '';
  container.replaceChildren();
  append(container, nodes);
  if (focusId) {
    const again = document.getElementById(focusId);
    if (again) again.focus({ preventScroll: true });
  }
  // A table wider than its box scrolls; make that box reachable by
  // keyboard (and only then, so narrow tables add no tab stops).
  requestAnimationFrame(() => {
    for (const box of container.querySelectorAll('.scroll')) {
      if (box.scrollWidth > box.clientWidth + 1) box.setAttribute('tabindex', '0');
      else box.removeAttribute('tabindex');
    }
  });
}

// table builds an accessible table: caption, header cells with scope, and
// one row per item: columns[i].cell(item) gives a cell's content (node,
// string, array); rowHeader makes the first cell a row header.
export function table({ caption, columns, rows, rowAttrs, empty, label }) {
  const head = h('tr', null, columns.map((c) => h('th', { scope: 'col', class: colClass(c) }, c.title)));
  const body = rows.map((r, i) => h('tr', rowAttrs ? rowAttrs(r, i) : null, cells(columns, r)));
  if (body.length === 0) {
    body.push(h('tr', null, h('td', { colspan: columns.length, class: 'empty' }, empty || 'Nothing yet.')));
  }
  const t = h('table', null, caption ? h('caption', null, caption) : null, h('thead', null, head), h('tbody', null, body));
  return h('div', { class: 'scroll', role: 'region', 'aria-label': label || caption || 'table' }, t);
}

function cells(columns, r) {
  return columns.map((c, i) => {
    const v = c.cell(r);
    const attrs = { class: colClass(c) };
    if (i === 0 && c.rowHeader) return h('th', { scope: 'row', ...attrs }, v);
    return h('td', attrs, v);
  });
}

// colClass: "num" right-aligns a column, "wide" hides it in a narrow
// window (the column is secondary and the table would need to scroll).
function colClass(c) {
  return [c.num ? 'num' : '', c.wide ? 'wide' : ''].filter(Boolean).join(' ') || null;
}

// badge renders a status word with a colour class; the word itself carries
// the meaning (colour is never the only signal).
export function badge(text, kind) {
  return h('span', { class: `badge b-${kind || 'muted'}` }, text);
}

// Status words → badge colours.
const kinds = {
  alive: 'ok', leader: 'ok', voter: 'info', nonvoter: 'warn', follower: 'info', candidate: 'warn',
  dead: 'bad', left: 'muted', unreachable: 'bad',
  running: 'info', finished: 'ok', failed: 'bad', cancelled: 'warn',
  consensus: 'ok', partial_consensus: 'warn', unresolved: 'warn', interrupted: 'bad',
  active: 'info', merged: 'muted', resolved: 'ok', accepted: 'ok', rejected: 'bad', accept: 'ok', reject: 'bad',
  agree: 'ok', disagree: 'bad', revise: 'warn', idle: 'ok', busy: 'info', registered: 'info',
  orphaned: 'warn', stopped: 'muted', suspended: 'warn', answered: 'ok', waiting: 'muted', eliminated: 'bad',
  delivered: 'ok', sent: 'muted', none: 'muted', abandoned: 'muted',
  up: 'ok', connecting: 'warn', down: 'bad',
};
export function statusBadge(word) {
  return badge(word || '—', kinds[word] || 'muted');
}

// time renders ms since the epoch (or an ISO string) as local time in a
// <time> element with the machine-readable value.
export function time(v) {
  if (v === undefined || v === null || v === 0 || v === '') return '—';
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) return String(v);
  return h('time', { datetime: d.toISOString(), title: d.toLocaleString() }, d.toLocaleTimeString());
}


// address renders a MAP Address compactly ("alice", "scope:ops", …).
export function address(a) {
  if (a === null || a === undefined) return '—';
  if (typeof a === 'string') return a;
  if (a.agent) return a.system ? `${a.system}:${a.agent}` : a.agent;
  if (a.agents) return a.agents.join(', ');
  if (a.scope) return `scope:${a.scope}`;
  if (a.role) return `role:${a.role}${a.within ? ' in ' + a.within : ''}`;
  if (a.participant) return a.participant;
  return JSON.stringify(a);
}

// throttle returns fn wrapped to run at most once per ms (trailing call kept).
export function throttle(fn, ms) {
  let timer = null;
  let again = false;
  const run = () => {
    timer = null;
    if (again) { again = false; fn(); timer = setTimeout(run, ms); }
  };
  return () => {
    if (timer) { again = true; return; }
    fn();
    timer = setTimeout(run, ms);
  };
}

// card is one figure of a <dl class="cards">: a title and its value.
export function card(title, value, attrs) {
  return h('div', { class: 'card' }, h('dt', null, title), h('dd', attrs || null, value));
}

// plural renders "1 run", "3 runs".
export function plural(n, noun) {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
