// Nodes knows the members of the system and which one the console talks
// to. It reads the node's /v1 API and, when the current node stops
// answering, moves to another member (the MAP connection does the same
// and tells Nodes where it landed). Other members are other origins: they
// allow the console's /v1 reads through their CORS allowance for member
// origins.

const fetchTimeoutMs = 3000;

export class Nodes extends EventTarget {
  constructor(pageOrigin) {
    super();
    this.page = pageOrigin;
    this.scheme = new URL(pageOrigin).protocol; // "http:" or "https:"
    this.current = pageOrigin;
    this.members = []; // [{id, origin, status, ...member}]
  }

  // originOf turns a member's advertised HTTP address into an origin with
  // the page's scheme; an unspecified host (0.0.0.0, ::) becomes the
  // page's host name.
  originOf(httpAddr) {
    const m = /^(.*):(\d+)$/.exec(httpAddr || '');
    if (!m) return '';
    let host = m[1];
    if (host === '' || host === '0.0.0.0' || host === '[::]' || host === '::') host = new URL(this.page).hostname;
    return `${this.scheme}//${host}:${m[2]}`;
  }

  // setMembers records /v1/members' answer.
  setMembers(list) {
    this.members = list.map((m) => ({ ...m, origin: this.originOf(m.httpAddr) }));
  }

  memberAt(origin) {
    return this.members.find((m) => m.origin === origin);
  }

  // candidates lists origins to try: the current node, alive members,
  // then the rest (a member gossip calls dead may be back already).
  candidates() {
    const out = [this.current];
    const add = (o) => { if (o && !out.includes(o)) out.push(o); };
    for (const m of this.members) if (m.status === 'alive') add(m.origin);
    for (const m of this.members) add(m.origin);
    add(this.page);
    return out;
  }

  setCurrent(origin) {
    if (origin && origin !== this.current) {
      this.current = origin;
      this.dispatchEvent(new CustomEvent('moved', { detail: origin }));
    }
  }

  // fetchFrom GETs path from one origin and decodes JSON; it throws on a
  // network error, a timeout or a non-2xx status.
  async fetchFrom(origin, path) {
    const ctl = new AbortController();
    const t = setTimeout(() => ctl.abort(), fetchTimeoutMs);
    try {
      const res = await fetch(origin + path, { signal: ctl.signal, cache: 'no-store', credentials: 'omit' });
      const body = await res.json().catch(() => ({}));
      if (!res.ok) {
        const err = new Error(body.error || body.reason || `${res.status} ${res.statusText}`);
        err.status = res.status;
        throw err;
      }
      return body;
    } finally {
      clearTimeout(t);
    }
  }

  // get GETs path from the current node, falling over to the other
  // candidates when it does not answer. A 4xx answer is returned as an
  // error without failover: another node would say the same.
  async get(path) {
    let last;
    for (const origin of this.candidates()) {
      try {
        const body = await this.fetchFrom(origin, path);
        this.setCurrent(origin);
        return body;
      } catch (err) {
        if (err.status && err.status < 500) throw err;
        last = err;
      }
    }
    throw last || new Error('no node answers');
  }

  // refreshMembers reads /v1/members (with failover) and records it.
  async refreshMembers() {
    const res = await this.get('/v1/members');
    this.setMembers(res.members || []);
    return this.members;
  }

  // url is an absolute URL of path on the current node (for links).
  url(path) {
    return this.current + path;
  }
}
