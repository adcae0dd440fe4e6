// Entry point: one MAP client and one Nodes view shared by every page, a
// hash router (#/system, #/agents, #/debates, #/debates/<runId>) and the
// connection indicator.
import { Nodes } from './nodes.js';
import { MapClient } from './map.js';
import { Store } from './store.js';
import { systemPage } from './system.js';
import { agentsPage } from './agents.js';
import { debatesPage } from './debates.js';
import { runPage } from './run.js';

const nodes = new Nodes(location.origin);
const map = new MapClient(nodes);
const store = new Store(map, nodes);
const ctx = { nodes, map, store };
const main = document.getElementById('main');
let page = null;

function route() {
  const hash = location.hash || '#/system';
  const parts = hash.slice(2).split('/');
  let name = parts[0] || 'system';
  if (page && page.stop) page.stop();
  main.replaceChildren();
  switch (name) {
    case 'agents': page = agentsPage(main, ctx); break;
    case 'debates':
      page = parts[1] ? runPage(main, ctx, decodeURIComponent(parts[1])) : debatesPage(main, ctx);
      break;
    default: name = 'system'; page = systemPage(main, ctx);
  }
  for (const a of document.querySelectorAll('nav a[data-page]')) {
    if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const h2 = main.querySelector('h2');
  document.title = `${h2 ? h2.textContent : 'Console'} · Concord`;
}

// The credential (when the node requires one) lives in this tab's
// sessionStorage only: never in a URL, a cookie or localStorage.
const authForm = document.getElementById('auth');
const authKey = 'concord.console.auth';
try {
  const saved = JSON.parse(sessionStorage.getItem(authKey) || 'null');
  if (saved && saved.token) map.setCredential(saved);
} catch (_) { /* no saved credential */ }
map.addEventListener('auth-required', (ev) => {
  const { code, hadCredential } = ev.detail;
  document.getElementById('auth-why').textContent = !hadCredential
    ? 'This node requires a credential: an API key (concord acl token create) or a bearer token.'
    : code === 1002 ? 'The credential has expired.' : 'The node refused the credential.';
  authForm.hidden = false;
  document.getElementById('auth-token').focus();
});
authForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const cred = {
    method: document.getElementById('auth-method').value,
    token: document.getElementById('auth-token').value.trim(),
    participantType: document.getElementById('auth-system').checked ? 'system' : 'client',
  };
  sessionStorage.setItem(authKey, JSON.stringify(cred));
  document.getElementById('auth-token').value = '';
  authForm.hidden = true;
  map.setCredential(cred);
});

const conn = document.getElementById('conn');
map.addEventListener('state', (ev) => {
  const { state, nodeId, origin } = ev.detail;
  conn.dataset.state = state;
  conn.dataset.node = nodeId;
  conn.textContent = state === 'open' ? `Connected to ${nodeId || origin}` : state === 'reconnecting' ? 'Reconnecting…'
    : state === 'auth' ? 'Credential required' : 'Connecting…';
});

window.addEventListener('hashchange', () => { route(); main.focus({ preventScroll: true }); });
route();
map.start();
store.start();
