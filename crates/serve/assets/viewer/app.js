// The keel run viewer (served by `keel serve`, see crates/cli/src/serve/viewer.rs).
//
// Plain ES2020, no framework, no build step. Every string that comes from a
// run (model text, tool arguments and results, errors) is put into the page
// as text: textContent or createTextNode, never parsed as HTML. Images are
// shown only from their bytes, through a blob: URL of an allowlisted
// raster type whose bytes start with that type's signature (the CSP
// allows img-src blob: and nothing else); files are listed, never opened.
'use strict';

(() => {
  const TOKEN_KEY = 'keel-token';
  const LIST_POLL_MS = 1000;
  const LIST_MAX_PAGES = 20;
  const BACKOFF_MIN_MS = 250;
  const BACKOFF_MAX_MS = 5000;
  const TERMINALS = new Set(['completed', 'failed', 'cancelled']);

  // ---------- small helpers ----------

  const $ = (id) => document.getElementById(id);

  /** Creates an element with classes, attributes (data-* via dataset) and text. */
  function el(tag, opts = {}, ...children) {
    const node = document.createElement(tag);
    if (opts.cls) node.className = opts.cls;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.data) {
      for (const [k, v] of Object.entries(opts.data)) {
        if (v !== undefined && v !== null) node.dataset[k] = String(v);
      }
    }
    if (opts.title) node.title = String(opts.title);
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }

  // ---------- media ----------

  /** The image types shown, with the bytes each must start with (never SVG). */
  const IMAGE_SIGNATURES = {
    'image/png': [[0, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]]],
    'image/jpeg': [[0, [0xff, 0xd8, 0xff]]],
    'image/gif': [[0, [0x47, 0x49, 0x46, 0x38]]],
    'image/webp': [[0, [0x52, 0x49, 0x46, 0x46]], [8, [0x57, 0x45, 0x42, 0x50]]],
  };

  function fmtSize(bytes) {
    if (bytes < 1024) return bytes + ' B';
    if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + ' KiB';
    return (bytes / (1024 * 1024)).toFixed(1) + ' MiB';
  }

  /** The bytes of a base64 string, or null when it is not base64. */
  function decodeBase64(text) {
    if (typeof text !== 'string') return null;
    try {
      const raw = atob(text);
      const bytes = new Uint8Array(raw.length);
      for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
      return bytes;
    } catch (_) {
      return null;
    }
  }

  function hasSignature(mediaType, bytes) {
    return IMAGE_SIGNATURES[mediaType].every(([at, sig]) =>
      sig.every((b, i) => bytes[at + i] === b)
    );
  }

  /** A media part refused or not loaded: a line of text saying so. */
  function mediaNote(text) {
    return el('div', { cls: 'media-note', text });
  }

  /**
   * An image part ({media_type, base64} or {url}): an <img> of a blob: URL
   * of its bytes, or a line of text when it is refused (a type outside the
   * allowlist, bytes that are not base64 or not that type) or is a URL
   * (never fetched by the page).
   */
  function imageNode(part) {
    const mediaType = typeof part.media_type === 'string' ? part.media_type : '';
    if (typeof part.url === 'string') {
      return mediaNote('image at ' + part.url + (mediaType ? ' (' + mediaType + ')' : '') + ', not loaded');
    }
    if (!Object.prototype.hasOwnProperty.call(IMAGE_SIGNATURES, mediaType)) {
      return mediaNote('image refused: media type ' + JSON.stringify(mediaType) + ' is not shown');
    }
    const bytes = decodeBase64(part.base64);
    if (!bytes || !hasSignature(mediaType, bytes)) {
      return mediaNote('image refused: the bytes are not ' + mediaType);
    }
    const img = document.createElement('img');
    img.className = 'media-image';
    img.alt = 'image ' + mediaType + ' ' + fmtSize(bytes.length);
    img.src = URL.createObjectURL(new Blob([bytes], { type: mediaType }));
    return el('figure', { cls: 'media', data: { mediaType } }, img,
      el('figcaption', { cls: 'muted', text: img.alt }));
  }

  /** A file part: listed with its type, name and size, never opened. */
  function fileNode(part) {
    const bytes = decodeBase64(part.base64);
    const size = bytes ? fmtSize(bytes.length) : 'unreadable bytes';
    return el(
      'div',
      { cls: 'file', data: { mediaType: String(part.media_type || '') } },
      el('span', { cls: 'file-type mono', text: String(part.media_type || '') }),
      el('span', { cls: 'file-name mono', text: String(part.name || '') }),
      el('span', { cls: 'file-size muted', text: size })
    );
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (_) {
      return '';
    }
  }

  /** Headers of every API request. */
  function apiHeaders(extra = {}) {
    const headers = Object.assign({}, extra);
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    return headers;
  }

  /** Timestamps: events carry microseconds, the run list may carry ms. */
  function toMs(ts) {
    if (typeof ts !== 'number' || !isFinite(ts) || ts <= 0) return null;
    return ts > 1e14 ? ts / 1000 : ts;
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms) || ms < 0) return '–';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
    const s = Math.round(ms / 1000);
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(m / 60) + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  }

  function fmtTime(ms) {
    if (ms === null) return '–';
    const d = new Date(ms);
    const today = new Date();
    const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
    if (d.toDateString() === today.toDateString()) return time;
    return d.toLocaleDateString([], { year: 'numeric', month: 'short', day: 'numeric' }) + ' ' + time;
  }

  function fmtInt(n) {
    return typeof n === 'number' && isFinite(n) ? n.toLocaleString() : '–';
  }

  /** Pretty JSON for a value, or the string itself when it is not JSON. */
  function pretty(value) {
    if (typeof value === 'string') {
      const trimmed = value.trim();
      if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
        try {
          return pretty(JSON.parse(trimmed));
        } catch (_) {
          return value;
        }
      }
      return value;
    }
    try {
      const flat = JSON.stringify(value);
      if (flat === undefined) return String(value);
      return flat.length <= 72 ? flat : JSON.stringify(value, null, 2);
    } catch (_) {
      return String(value);
    }
  }

  // ---------- notices and problems ----------

  function showNotice(title, detail, kind = 'error') {
    const box = $('notice');
    $('notice-title').textContent = title || '';
    $('notice-detail').textContent = detail || '';
    box.dataset.kind = kind;
    box.hidden = false;
  }

  function hideNotice() {
    $('notice').hidden = true;
  }

  function askForToken() {
    showNotice(
      token() ? 'The daemon refused this token.' : 'This daemon needs a token.',
      'Paste the bearer token (the one in --token-file or KEEL_TOKEN) in the Token field above and press Save.',
      'auth'
    );
    const input = $('token');
    input.classList.add('attention');
    input.focus();
  }

  /** Reads an RFC 9457 problem from a failed response (or makes one). */
  async function problemOf(response) {
    let doc = null;
    try {
      const text = await response.text();
      doc = JSON.parse(text);
    } catch (_) {
      doc = null;
    }
    if (!doc || typeof doc !== 'object') doc = {};
    return {
      status: response.status,
      type: typeof doc.type === 'string' ? doc.type : '',
      title: typeof doc.title === 'string' ? doc.title : 'HTTP ' + response.status,
      detail: typeof doc.detail === 'string' ? doc.detail : '',
    };
  }

  /** A POST to the API with a JSON body; returns the parsed answer or throws a problem. */
  async function postJson(path, body) {
    const response = await fetch(path, {
      method: 'POST',
      headers: apiHeaders({ 'Content-Type': 'application/json', Accept: 'application/json' }),
      body: JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
    if (response.status === 401) {
      askForToken();
      throw { status: 401, title: 'Token needed', detail: '' };
    }
    if (!response.ok) throw await problemOf(response);
    try {
      return await response.json();
    } catch (_) {
      return null;
    }
  }

  // ---------- token ----------

  const tokenListeners = [];

  function setupToken() {
    const input = $('token');
    input.value = token();
    const save = () => {
      try {
        const value = input.value.trim();
        if (value) sessionStorage.setItem(TOKEN_KEY, value);
        else sessionStorage.removeItem(TOKEN_KEY);
      } catch (_) {
        // sessionStorage unavailable: nothing to store it in.
      }
      input.classList.remove('attention');
      hideNotice();
      for (const f of tokenListeners) f();
    };
    $('token-save').addEventListener('click', save);
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') save();
    });
  }

  // ---------- the run list ----------

  function startList() {
    document.title = 'Keel runs';
    $('list-page').hidden = false;
    const body = $('runs-body');
    let timer = null;
    let stopped = false;

    const rowOf = new Map();

    function cell(row, index) {
      while (row.cells.length <= index) row.insertCell();
      return row.cells[index];
    }

    function render(runs) {
      const seen = new Set();
      // Newest first.
      const ordered = runs.slice().reverse();
      const now = Date.now();
      ordered.forEach((run, i) => {
        if (!run || typeof run.run_id !== 'string') return;
        const id = run.run_id;
        seen.add(id);
        let row = rowOf.get(id);
        if (!row) {
          row = document.createElement('tr');
          row.className = 'run';
          row.dataset.runId = id;
          const statusCell = cell(row, 0);
          statusCell.append(el('span', { cls: 'status' }));
          const link = el('a', { cls: 'mono', text: id });
          link.href = '/runs/' + encodeURIComponent(id);
          cell(row, 1).append(link);
          for (let c = 2; c <= 5; c++) cell(row, c);
          row.cells[3].className = 'num';
          row.cells[4].className = 'num';
          row.cells[5].className = 'num';
          rowOf.set(id, row);
        }
        const status = typeof run.status === 'string' ? run.status : 'unknown';
        row.dataset.status = status;
        const badge = row.cells[0].firstChild;
        badge.textContent = status;
        badge.dataset.status = status;
        const started = toMs(run.started_ts);
        const updated = toMs(run.updated_ts);
        row.cells[2].textContent = fmtTime(started);
        let duration = null;
        if (started !== null) {
          if (status === 'running' || run.live) duration = now - started;
          else if (updated !== null) duration = updated - started;
        }
        row.cells[3].textContent = fmtDuration(duration);
        row.cells[4].textContent = typeof run.turns === 'number' ? fmtInt(run.turns) : '–';
        const usage = run.usage && typeof run.usage === 'object' ? run.usage : null;
        row.cells[5].textContent = usage
          ? fmtInt(usage.input_tokens || 0) + ' / ' + fmtInt(usage.output_tokens || 0)
          : '–';
        // Keep the DOM order equal to `ordered`.
        if (body.children[i] !== row) body.insertBefore(row, body.children[i] || null);
      });
      for (const [id, row] of rowOf) {
        if (!seen.has(id)) {
          row.remove();
          rowOf.delete(id);
        }
      }
      $('runs-empty').hidden = rowOf.size > 0;
      $('list-updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    }

    // The filters (status, conversation, since) are the page's own query
    // (`/?status=failed`), so a filtered list can be linked and reloaded;
    // each is passed to `GET /v1/runs` as is, with `after` for paging.
    const pageQuery = new URLSearchParams(location.search);
    const filters = readFilters(pageQuery);
    showFilters(filters);
    // `/?limit=N` sets the page size (the daemon's default otherwise).
    const pageLimit = /^[0-9]{1,4}$/.test(pageQuery.get('limit') || '') ? pageQuery.get('limit') : '';
    let pageCap = LIST_MAX_PAGES;
    let generation = 0;

    function listQuery(after) {
      const params = new URLSearchParams();
      for (const name of FILTER_NAMES) {
        if (filters[name]) params.set(name, filters[name]);
      }
      if (pageLimit) params.set('limit', pageLimit);
      if (after !== null) params.set('after', after);
      const text = params.toString();
      return text ? '?' + text : '';
    }

    function applyFilters(next) {
      for (const name of FILTER_NAMES) filters[name] = next[name] || '';
      const query = listQuery(null);
      history.replaceState(null, '', '/' + query);
      pageCap = LIST_MAX_PAGES;
      for (const row of rowOf.values()) row.remove();
      rowOf.clear();
      if (timer) clearTimeout(timer);
      poll();
    }

    $('list-filters').addEventListener('submit', (e) => {
      e.preventDefault();
      applyFilters(formFilters());
    });
    $('filter-clear').addEventListener('click', () => {
      showFilters({});
      applyFilters({});
    });
    $('runs-more-button').addEventListener('click', () => {
      pageCap += LIST_MAX_PAGES;
      if (timer) clearTimeout(timer);
      poll();
    });

    function showMore(shown, more) {
      $('runs-more').hidden = !more;
      $('runs-more-text').textContent = more
        ? 'Showing the first ' + fmtInt(shown) + ' runs in start order; more follow.'
        : '';
    }

    async function poll() {
      timer = null;
      if (stopped) return;
      const mine = ++generation;
      try {
        // The list is paged (`next`); follow it, at most `pageCap` pages
        // a poll ("Show more" raises it), with the filters on every page.
        const runs = [];
        let after = null;
        let failed = false;
        for (let page = 0; page < pageCap; page++) {
          const response = await fetch('/v1/runs' + listQuery(after), {
            headers: apiHeaders({ Accept: 'application/json' }),
            credentials: 'omit',
            cache: 'no-store',
          });
          if (mine !== generation) return; // the filters changed meanwhile
          if (response.status === 401) {
            askForToken();
            return; // until the token is saved
          }
          if (!response.ok) {
            const p = await problemOf(response);
            showNotice(p.title, p.detail);
            failed = true;
            break;
          }
          const doc = await response.json();
          if (mine !== generation) return;
          if (Array.isArray(doc && doc.runs)) runs.push(...doc.runs);
          after = doc && typeof doc.next === 'string' ? doc.next : null;
          if (after === null) break;
        }
        if (!failed) {
          const notice = $('notice');
          if (!notice.hidden && notice.dataset.kind !== 'auth') hideNotice();
          render(runs);
          showMore(runs.length, after !== null);
          const filtered = FILTER_NAMES.some((name) => filters[name]);
          $('runs-filtered-empty').hidden = !(filtered && rowOf.size === 0);
          if (filtered) $('runs-empty').hidden = true;
        }
      } catch (e) {
        if (mine !== generation) return;
        showNotice('Cannot reach the daemon.', String(e && e.message ? e.message : e));
      }
      if (!stopped && mine === generation) timer = setTimeout(poll, LIST_POLL_MS);
    }

    tokenListeners.push(() => {
      if (timer) clearTimeout(timer);
      poll();
    });
    poll();
  }

  /** The list's filters, by their `GET /v1/runs` names. */
  const FILTER_NAMES = ['status', 'conversation', 'since'];

  /** The filters of a page query (`since` as unix milliseconds). */
  function readFilters(params) {
    const out = {};
    for (const name of FILTER_NAMES) out[name] = params.get(name) || '';
    return out;
  }

  /** `ms` (unix milliseconds) as a datetime-local value in local time. */
  function localInputValue(ms) {
    const date = new Date(ms);
    if (Number.isNaN(date.getTime())) return '';
    const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
    return local.toISOString().slice(0, 19);
  }

  /** Puts `filters` into the form. */
  function showFilters(filters) {
    $('filter-status').value = filters.status || '';
    $('filter-conversation').value = filters.conversation || '';
    const since = /^[0-9]+$/.test(filters.since || '') ? Number(filters.since) : NaN;
    $('filter-since').value = Number.isFinite(since) ? localInputValue(since) : '';
  }

  /** The form's filters: `since` from local time to unix milliseconds. */
  function formFilters() {
    const since = $('filter-since').value;
    const ms = since ? new Date(since).getTime() : NaN;
    return {
      status: $('filter-status').value,
      conversation: $('filter-conversation').value.trim(),
      since: Number.isFinite(ms) && ms >= 0 ? String(ms) : '',
    };
  }

  // ---------- following a run's events (sub-runs) ----------

  /** Most sub-runs one page follows; more are listed, not followed. */
  const MAX_SUBRUNS = 64;
  /** Most reconnects of one sub-run's stream. */
  const SUBRUN_RETRIES = 20;

  /**
   * Follows `/v1/runs/{runId}/events` from its start to its terminal,
   * calling `onEvent(ev)` once per event in seq order (a reconnect sends
   * Last-Event-ID, so nothing repeats). Each event's strings are the
   * caller's to render as text.
   */
  async function followRun(runId, onEvent) {
    const url = '/v1/runs/' + encodeURIComponent(runId) + '/events';
    let lastSeq = 0;
    let ended = false;
    for (let attempt = 0; attempt <= SUBRUN_RETRIES && !ended; attempt++) {
      const headers = apiHeaders({ Accept: 'text/event-stream' });
      if (lastSeq > 0) headers['Last-Event-ID'] = String(lastSeq);
      let response;
      try {
        response = await fetch(url, { headers, credentials: 'omit', cache: 'no-store' });
      } catch (_) {
        await new Promise((r) => setTimeout(r, BACKOFF_MIN_MS * (attempt + 1)));
        continue;
      }
      if (response.status === 204) return;
      if (!response.ok || !response.body) {
        if (response.status >= 500 || response.status === 429) {
          await new Promise((r) => setTimeout(r, BACKOFF_MIN_MS * (attempt + 1)));
          continue;
        }
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder('utf-8');
      let buffer = '';
      let data = [];
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          const lines = buffer.split(/\r\n|\n/);
          buffer = lines.pop();
          for (const line of lines) {
            if (line.startsWith('data:')) {
              data.push(line.slice(5).replace(/^ /, ''));
              continue;
            }
            if (line !== '' || data.length === 0) continue;
            let ev = null;
            try {
              ev = JSON.parse(data.join('\n'));
            } catch (_) {
              ev = null;
            }
            data = [];
            if (!ev || typeof ev.seq !== 'number' || ev.seq !== lastSeq + 1) continue;
            lastSeq = ev.seq;
            onEvent(ev);
            if (/^run\.(completed|failed|cancelled)$/.test(String(ev.kind))) ended = true;
          }
          if (ended) break;
        }
      } catch (_) {
        // dropped: reconnect after the last event seen
      }
      try {
        reader.cancel();
      } catch (_) {
        // already closed
      }
    }
  }

  // ---------- the run page ----------

  function startRun(runId) {
    document.title = 'Keel · ' + runId;
    $('run-page').hidden = false;
    $('crumbs').hidden = false;
    $('crumb-run').textContent = runId;
    $('run-id').textContent = runId;
    const base = '/v1/runs/' + encodeURIComponent(runId);

    const state = {
      lastSeq: 0,
      count: 0,
      status: null, // running|completed|failed|cancelled once known
      terminal: false,
      model: null,
      runStart: null, // ts (µs)
      runEnd: null,
      lastTs: null,
      lastTsAt: 0, // performance.now() when lastTs was applied
      turns: 0,
      usageIn: 0,
      usageOut: 0,
      scopes: [], // timeline bars, in start order
      scopeByKey: new Map(),
      messages: new Map(), // operation_id -> assistant message state
      calls: new Map(), // call_id -> {node, result, status}
      interactions: new Map(), // interaction_id -> node
    };

    const transcript = $('transcript');

    // ----- status -----

    function setStatus(status) {
      state.status = status;
      const node = $('run-status');
      node.textContent = status;
      node.dataset.status = status;
      document.body.dataset.status = status;
      $('cancel').disabled = TERMINALS.has(status);
    }

    function setStream(text, kind) {
      const node = $('stream-state');
      node.textContent = text;
      node.dataset.kind = kind;
      document.body.dataset.stream = kind;
    }

    function updateStats() {
      $('stat-turns').textContent = fmtInt(state.turns);
      $('stat-tokens').textContent = fmtInt(state.usageIn) + ' / ' + fmtInt(state.usageOut);
      $('stat-started').textContent = state.runStart ? fmtTime(state.runStart / 1000) : '–';
      const end = state.runEnd !== null ? state.runEnd : nowTs();
      $('stat-duration').textContent =
        state.runStart !== null && end !== null ? fmtDuration((end - state.runStart) / 1000) : '–';
    }

    /** The run's "now" in event time (µs): the last event's ts plus the time since. */
    function nowTs() {
      if (state.lastTs === null) return null;
      if (state.terminal) return state.lastTs;
      return state.lastTs + (performance.now() - state.lastTsAt) * 1000;
    }

    // ----- where the run comes from: its parent and the tree -----

    /** A link to run `id`'s page, its id as text. */
    function runLink(id) {
      const link = el('a', { cls: 'mono', text: id });
      link.href = '/runs/' + encodeURIComponent(id);
      return link;
    }

    /** "forked from P at seq N" or "continues P", P linking to its page. */
    function showParent(p) {
      const link = p.parent && typeof p.parent === 'object' ? p.parent : null;
      if (link && link.run_id) {
        const node = $('run-parent');
        clear(node);
        node.append('sub-run of ', runLink(String(link.run_id)), ' (call ' + String(link.call_id || '') + ')');
        node.dataset.parent = String(link.run_id);
        node.hidden = false;
        return;
      }
      const fork = p.forked_from && typeof p.forked_from === 'object' ? p.forked_from : null;
      const parent = fork ? String(fork.run_id || '') : p.continues ? String(p.continues) : '';
      if (!parent) return;
      const node = $('run-parent');
      clear(node);
      if (fork) node.append('forked from ', runLink(parent), ' at seq ' + String(fork.seq));
      else node.append('continues ', runLink(parent));
      node.dataset.parent = parent;
      node.hidden = false;
    }

    /** The conversation's tree: nested lists, each run a link (this one in bold). */
    function renderTree(runs) {
      const root = $('tree');
      clear(root);
      const lists = [root];
      for (const r of runs) {
        const depth = Math.max(0, Math.min(Number(r.depth) || 0, lists.length - 1));
        lists.length = depth + 1;
        const id = String(r.run_id || '');
        const item = el('li', { cls: 'tree-run', data: { runId: id, status: r.status } });
        item.append(id === runId ? el('strong', { cls: 'mono', text: id }) : runLink(id));
        item.append(' ' + String(r.status || ''));
        if (r.forked_from) item.append(' · forked at seq ' + String(r.forked_from.seq));
        else if (r.continues) item.append(' · continues');
        const below = el('ul');
        item.append(below);
        lists[depth].append(item);
        lists.push(below);
      }
      if (runs.length > 1) $('tree-panel').hidden = false;
    }

    async function loadTree() {
      try {
        const response = await fetch(base + '/tree', { headers: apiHeaders() });
        if (!response.ok) return;
        const body = await response.json();
        if (Array.isArray(body.runs)) renderTree(body.runs);
      } catch (_) {
        // The tree is an aid: the run page works without it.
      }
    }


    // ----- sub-runs: the run tree, each child's timeline -----

    const subruns = { count: 0, nodes: new Map() }; // run id -> its <li>

    /** A child's timeline: one row per scope (turn, model call, tool call). */
    function subTimeline(box) {
      const t = { start: null, end: null, scopes: new Map(), rows: el('div', { cls: 'sub-rows' }) };
      box.append(t.rows);
      t.render = () => {
        if (t.start === null) return;
        let last = t.start;
        for (const s of t.scopes.values()) last = Math.max(last, s.end !== null ? s.end : s.start);
        const t1 = t.end !== null ? t.end : last;
        const span = Math.max(1000, t1 - t.start);
        for (const s of t.scopes.values()) {
          const end = s.end !== null ? s.end : t1;
          const left = Math.max(0, Math.min(100, ((s.start - t.start) / span) * 100));
          const width = Math.max(0.5, Math.min(100 - left, ((end - s.start) / span) * 100));
          s.bar.style.left = left.toFixed(3) + '%';
          s.bar.style.width = width.toFixed(3) + '%';
          s.bar.dataset.state = s.state;
          s.row.dataset.state = s.state;
          s.bar.title = s.label + ': ' + s.state + ', ' + fmtDuration((end - s.start) / 1000);
        }
      };
      t.started = (key, label, ts) => {
        if (t.scopes.has(key)) return;
        const bar = el('div', { cls: 'bar' });
        const row = el('div', { cls: 'tl-row sub-row' }, el('div', { cls: 'tl-label', text: label }), el('div', { cls: 'tl-track' }, bar));
        t.rows.append(row);
        t.scopes.set(key, { label, start: ts, end: null, state: 'running', bar, row });
      };
      t.ended = (key, ts, st) => {
        const s = t.scopes.get(key);
        if (!s) return;
        s.end = ts;
        s.state = st;
      };
      return t;
    }

    /** Adds sub-run `childId` (started by call `callId` of tool `tool`)
     * under `list` at `depth`, and follows its events. */
    function addSubRun(list, childId, tool, callId, depth) {
      if (!childId || subruns.nodes.has(childId)) return;
      $('subruns-panel').hidden = false;
      const status = el('span', { cls: 'status subrun-status', text: 'starting' });
      const head = el('div', { cls: 'subrun-head' }, runLink(childId), ' ',
        el('span', { cls: 'subrun-tool', text: tool + ' · ' + callId }), ' ', status);
      const answer = el('div', { cls: 'subrun-text' });
      const timeline = el('div', { cls: 'subrun-timeline' });
      const below = el('ul', { cls: 'subruns' });
      const item = el('li', { cls: 'subrun', data: { runId: childId, depth: String(depth), status: 'starting' } },
        head, timeline, answer, below);
      list.append(item);
      subruns.nodes.set(childId, item);
      subruns.count += 1;
      if (subruns.count > MAX_SUBRUNS) {
        status.textContent = 'not followed';
        return;
      }
      const tl = subTimeline(timeline);
      const tools = new Map(); // call id -> tool name
      let text = '';
      const setSubStatus = (st) => {
        status.textContent = st;
        status.dataset.status = st;
        item.dataset.status = st;
      };
      followRun(childId, (ev) => {
        const kind = String(ev.kind || '');
        const p = ev.payload && typeof ev.payload === 'object' ? ev.payload : {};
        const ts = typeof ev.ts === 'number' ? ev.ts : tl.start;
        item.dataset.lastSeq = String(ev.seq);
        if (kind === 'run.started') {
          tl.start = ts;
          setSubStatus('running');
        } else if (kind === 'turn.started') tl.started('turn:' + p.turn, 'turn ' + p.turn, ts);
        else if (kind === 'model.started') tl.started('model:' + p.operation_id, 'model ' + String(p.model || ''), ts);
        else if (kind === 'tool.started') {
          tools.set(String(p.call_id), String(p.tool || ''));
          tl.started('tool:' + p.call_id, 'tool ' + String(p.tool || '') + ' · ' + String(p.call_id), ts);
        } else if (kind === 'tool.sub_run') {
          const call = String(p.call_id || '');
          addSubRun(below, String(p.run_id || ''), tools.get(call) || 'agent', call, depth + 1);
        } else if (kind === 'model.text_delta' && text.length < 2000) {
          text += typeof p.text === 'string' ? p.text : '';
          answer.textContent = text.slice(0, 2000);
        }
        const m = /^(turn|model|tool|run)\.(completed|failed|cancelled)$/.exec(kind);
        if (m) {
          const key = m[1] === 'turn' ? 'turn:' + p.turn : m[1] === 'model' ? 'model:' + p.operation_id : 'tool:' + p.call_id;
          const st = m[1] === 'tool' && p.outcome === 'uncertain' ? 'uncertain' : m[2];
          if (m[1] === 'run') {
            tl.end = ts;
            setSubStatus(m[2]);
            if (m[2] !== 'completed') {
              const why = String(p.error || p.reason || '');
              if (why) below.before(el('div', { cls: 'note', data: { kind: m[2] }, text: 'sub-run ' + m[2] + ': ' + why }));
            }
          } else tl.ended(key, ts, st);
        }
        tl.render();
      });
    }

    // ----- transcript -----

    function note(text, kind, parent) {
      const node = el('div', { cls: 'note', data: { kind }, text });
      (parent || transcript).append(node);
      return node;
    }

    function message(role, label) {
      const node = el('div', { cls: 'message', data: { role } });
      node.append(el('div', { cls: 'role', text: label || role }));
      const body = el('div', { cls: 'body' });
      node.append(body);
      transcript.append(node);
      return { node, body, text: null };
    }

    /** Appends text to a message, in its current `.text` node (a new one after a tool call). */
    function appendText(msg, text) {
      if (!msg.text) {
        msg.text = el('div', { cls: 'text' });
        msg.body.append(msg.text);
      }
      msg.text.append(document.createTextNode(text));
    }

    /**
     * A collapsed reasoning block (<details>, marked as reasoning) appended
     * to a message; its text goes in `.reasoning-text`.
     */
    function reasoningBlock(msg, label) {
      const text = el('div', { cls: 'reasoning-text' });
      const summary = el('summary', { text: label || 'reasoning' });
      const node = el('details', { cls: 'reasoning', data: { state: 'streaming' } }, summary, text);
      msg.body.append(node);
      msg.text = null;
      return { node, summary, text };
    }

    function reasoningDelta(p) {
      const msg = assistantFor(p);
      if (!msg.reasoning) msg.reasoning = reasoningBlock(msg);
      msg.reasoning.text.append(document.createTextNode(typeof p.text === 'string' ? p.text : ''));
    }

    /** `model.reasoning_end`: closes the open block, or adds a redacted one. */
    function reasoningEnd(p) {
      const msg = assistantFor(p);
      const block = p.redacted ? reasoningBlock(msg, 'reasoning · redacted') : msg.reasoning;
      msg.reasoning = null;
      if (!block) return;
      block.node.dataset.state = p.redacted ? 'redacted' : p.signature ? 'signed' : 'done';
      if (p.signature) block.summary.textContent = 'reasoning · signed';
      if (p.redacted) block.text.textContent = 'redacted by the provider';
    }

    /** A reasoning part of a message in the input history. */
    function inputReasoning(msg, part) {
      const redacted = typeof part.redacted === 'string';
      const block = reasoningBlock(msg, redacted ? 'reasoning · redacted' : 'reasoning');
      block.node.dataset.state = redacted ? 'redacted' : 'done';
      block.text.textContent = redacted ? 'redacted by the provider' : String(part.text || '');
    }

    /** Images beside a tool's result. */
    function appendImages(parent, images) {
      if (!Array.isArray(images)) return;
      for (const image of images) {
        if (image && typeof image === 'object') parent.append(imageNode(image));
      }
    }

    function toolCall(msg, callId, name, args) {
      const status = el('span', { cls: 'call-status', text: 'requested' });
      const head = el(
        'div',
        { cls: 'call-head' },
        el('span', { cls: 'call-name mono', text: name }),
        el('span', { cls: 'call-id mono', text: callId }),
        status
      );
      const argsNode = el('pre', { cls: 'tool-args mono', text: pretty(args) });
      const result = el('pre', { cls: 'tool-result mono', data: { state: 'pending' } });
      const resultLabel = el('div', { cls: 'label', text: 'result' });
      const images = el('div', { cls: 'tool-images' });
      const resultBox = el('div', { cls: 'io io-result' }, resultLabel, result, images);
      resultBox.hidden = true;
      const node = el(
        'div',
        { cls: 'tool-call', data: { callId, toolName: name, state: 'requested' } },
        head,
        el(
          'div',
          { cls: 'call-io' },
          el('div', { cls: 'io io-args' }, el('div', { cls: 'label', text: 'arguments' }), argsNode),
          resultBox
        )
      );
      msg.body.append(node);
      msg.text = null;
      const call = { node, status, result, resultLabel, resultBox, images };
      if (callId) state.calls.set(callId, call);
      return call;
    }

    function setCall(call, callState, statusText, resultText) {
      call.node.dataset.state = callState;
      call.status.textContent = statusText;
      call.status.dataset.state = callState;
      if (resultText !== undefined) {
        call.result.textContent = resultText;
        call.result.dataset.state = callState;
        call.resultBox.hidden = false;
        call.resultLabel.textContent = callState === 'completed' ? 'result' : 'error';
      }
    }

    function assistantFor(p) {
      const op = p.operation_id;
      let msg = state.messages.get(op);
      if (!msg) {
        const attempt = scopeFor('model', op);
        const label =
          'assistant' + (attempt && attempt.attempt > 1 ? ' · attempt ' + attempt.attempt : '');
        msg = message('assistant', label);
        msg.node.dataset.operationId = op;
        state.messages.set(op, msg);
      }
      return msg;
    }

    function renderInput(m) {
      if (!m || typeof m !== 'object') return;
      const role = typeof m.role === 'string' ? m.role : 'user';
      const msg = message(role);
      const parts = Array.isArray(m.parts) ? m.parts : [];
      for (const part of parts) {
        if (!part || typeof part !== 'object') continue;
        if (part.type === 'text') {
          appendText(msg, typeof part.text === 'string' ? part.text : '');
        } else if (part.type === 'image') {
          msg.body.append(imageNode(part));
          msg.text = null;
        } else if (part.type === 'file') {
          msg.body.append(fileNode(part));
          msg.text = null;
        } else if (part.type === 'reasoning') {
          inputReasoning(msg, part);
        } else if (part.type === 'tool_call') {
          toolCall(msg, String(part.call_id || ''), String(part.name || ''), part.arguments);
        } else if (part.type === 'tool_result') {
          const callId = String(part.call_id || '');
          const call = state.calls.get(callId);
          const bad = part.is_error === true;
          const content = typeof part.content === 'string' ? part.content : pretty(part.content);
          if (call && call.resultBox.hidden) {
            setCall(call, bad ? 'failed' : 'completed', bad ? 'failed' : 'completed', pretty(content));
            appendImages(call.images, part.images);
          }
          const box = el(
            'div',
            { cls: 'input-result', data: { callId } },
            el('div', { cls: 'label', text: (bad ? 'error for ' : 'result for ') + callId }),
            el('pre', { cls: 'tool-result mono', data: { state: bad ? 'failed' : 'completed' }, text: pretty(content) })
          );
          appendImages(box, part.images);
          msg.body.append(box);
          msg.text = null;
        }
      }
    }

    // ----- interactions -----

    function updatePending() {
      let n = 0;
      for (const node of state.interactions.values()) if (node.dataset.state === 'running') n++;
      $('pending').hidden = n === 0;
      $('pending-text').textContent =
        n === 1 ? 'A tool call is waiting for your decision below.' : n + ' tool calls are waiting for your decision below.';
    }

    function interaction(p) {
      const iid = String(p.interaction_id);
      const callId = p.call_id ? String(p.call_id) : null;
      const call = callId ? state.calls.get(callId) : null;
      const approve = el('button', { cls: 'approve', text: 'Approve' });
      approve.type = 'button';
      const deny = el('button', { cls: 'deny', text: 'Deny' });
      deny.type = 'button';
      const result = el('span', { cls: 'decision' });
      const what = call
        ? 'Run ' + call.node.dataset.toolName + ' (' + callId + ')?'
        : 'Request: ' + String(p.request || 'approval');
      const node = el(
        'div',
        { cls: 'interaction', data: { interactionId: iid, state: 'running' } },
        el('span', { cls: 'question', text: what }),
        el('span', { cls: 'buttons' }, approve, deny),
        result
      );
      const decide = async (decision) => {
        approve.disabled = true;
        deny.disabled = true;
        result.textContent = 'sending…';
        try {
          await postJson(base + '/interactions/' + encodeURIComponent(iid), { decision });
          if (node.dataset.state === 'running') result.textContent = decision + ', waiting for the run';
        } catch (p) {
          result.textContent = (p && p.title ? p.title : 'failed') + (p && p.detail ? ': ' + p.detail : '');
          if (node.dataset.state === 'running') {
            approve.disabled = false;
            deny.disabled = false;
          }
        }
      };
      node.callId = callId;
      approve.addEventListener('click', () => decide('approved'));
      deny.addEventListener('click', () => decide('denied'));
      if (call) {
        call.node.append(node);
        setCall(call, 'awaiting', 'awaiting approval');
      } else {
        transcript.append(node);
      }
      state.interactions.set(iid, node);
      updatePending();
    }

    function interactionEnded(p, terminal) {
      const node = state.interactions.get(String(p.interaction_id));
      if (!node) return;
      node.dataset.state = terminal;
      const buttons = node.querySelector('.buttons');
      if (buttons) buttons.remove();
      const decision = node.querySelector('.decision');
      let text = terminal;
      if (terminal === 'completed') text = typeof p.decision === 'string' ? p.decision : 'answered';
      else if (terminal === 'failed') text = 'failed: ' + String(p.error || '');
      decision.textContent = text;
      node.dataset.decision = terminal === 'completed' ? String(p.decision || '') : terminal;
      // The call it gated shows the decision until its tool events (if any) arrive.
      const call = node.callId ? state.calls.get(node.callId) : null;
      if (call && call.node.dataset.state === 'awaiting') {
        if (terminal === 'completed' && p.decision === 'approved') setCall(call, 'approved', 'approved');
        else if (terminal === 'completed') setCall(call, 'denied', String(p.decision || 'denied'));
        else setCall(call, terminal, 'approval ' + terminal);
      }
      updatePending();
    }

    // ----- timeline -----

    function scopeKey(scope, p) {
      switch (scope) {
        case 'run':
          return 'run';
        case 'turn':
          return 'turn:' + p.turn;
        case 'model':
          return 'model:' + p.operation_id;
        case 'tool':
          return 'tool:' + p.call_id;
        case 'interaction':
          return 'interaction:' + p.interaction_id;
        default:
          return scope;
      }
    }

    function scopeFor(scope, id) {
      return state.scopeByKey.get(scope + ':' + id) || null;
    }

    function scopeLabel(scope, p) {
      switch (scope) {
        case 'run':
          return 'run';
        case 'turn':
          return 'turn ' + p.turn;
        case 'model':
          return 'model ' + (p.model || '') + ' · ' + p.operation_id;
        case 'tool':
          return 'tool ' + (p.tool || '') + ' · ' + p.call_id;
        case 'interaction':
          return 'approval · ' + (p.call_id || p.interaction_id);
        default:
          return scope;
      }
    }

    function scopeStarted(scope, p, ts) {
      const key = scopeKey(scope, p);
      const s = {
        key,
        scope,
        label: scopeLabel(scope, p),
        start: ts,
        end: null,
        state: 'running',
        attempt: scope === 'model' && typeof p.attempt === 'number' ? p.attempt : null,
        detail: '',
      };
      state.scopes.push(s);
      state.scopeByKey.set(key, s);
      scheduleTimeline();
      return s;
    }

    function scopeEnded(scope, p, ts, terminal, detail) {
      const s = state.scopeByKey.get(scopeKey(scope, p));
      if (!s) return null;
      s.end = ts;
      s.state = terminal;
      if (detail) s.detail = detail;
      scheduleTimeline();
      return s;
    }

    let timelineQueued = false;
    function scheduleTimeline() {
      if (timelineQueued) return;
      timelineQueued = true;
      requestAnimationFrame(() => {
        timelineQueued = false;
        renderTimeline();
        updateStats();
      });
    }

    const barNodes = new Map(); // key -> {row, bar, dur}
    let axisNode = null;

    function renderTimeline() {
      const root = $('timeline');
      if (state.runStart === null || state.scopes.length === 0) return;
      const t0 = state.runStart;
      let t1 = state.runEnd !== null ? state.runEnd : nowTs();
      if (t1 === null || t1 <= t0) t1 = t0 + 1000; // at least 1 ms wide
      const span = t1 - t0;
      if (!axisNode) {
        axisNode = el('div', { cls: 'tl-row tl-axis' }, el('div', { cls: 'tl-label' }), el('div', { cls: 'tl-track' }), el('div', { cls: 'tl-dur' }));
        root.append(axisNode);
      }
      const axisTrack = axisNode.children[1];
      clear(axisTrack);
      for (let i = 0; i <= 4; i++) {
        const tick = el('span', { cls: 'tick', text: fmtDuration((span * i) / 4 / 1000) });
        tick.style.left = i * 25 + '%';
        if (i === 4) tick.classList.add('last');
        axisTrack.append(tick);
      }
      for (const s of state.scopes) {
        let entry = barNodes.get(s.key);
        if (!entry) {
          const bar = el('div', { cls: 'bar' });
          const label = el('div', { cls: 'tl-label', text: s.label });
          if (s.attempt !== null && s.attempt > 1) {
            label.append(el('span', { cls: 'retry-tag', text: 'retry ' + s.attempt }));
          }
          const row = el(
            'div',
            { cls: 'tl-row', data: { scope: s.scope } },
            label,
            el('div', { cls: 'tl-track' }, bar),
            el('div', { cls: 'tl-dur' })
          );
          entry = { row, bar, dur: row.children[2] };
          barNodes.set(s.key, entry);
          root.append(row);
        }
        const { bar, dur } = entry;
        const end = s.end !== null ? s.end : t1;
        const left = Math.max(0, Math.min(100, ((s.start - t0) / span) * 100));
        const width = Math.max(0, Math.min(100 - left, ((end - s.start) / span) * 100));
        bar.style.left = left.toFixed(3) + '%';
        bar.style.width = width.toFixed(3) + '%';
        bar.dataset.scope = s.scope;
        bar.dataset.state = s.state;
        if (s.attempt !== null) bar.dataset.attempt = String(s.attempt);
        bar.classList.toggle('retry', s.attempt !== null && s.attempt > 1);
        const ms = (end - s.start) / 1000;
        dur.textContent = fmtDuration(ms) + (s.state === 'running' ? ' …' : '');
        bar.title = s.label + ': ' + s.state + ', ' + fmtDuration(ms) + (s.detail ? ' — ' + s.detail : '');
        entry.row.dataset.state = s.state;
      }
    }

    // Running scopes grow while the run is live.
    setInterval(() => {
      if (!state.terminal && state.runStart !== null) scheduleTimeline();
    }, 500);

    // ----- applying events -----

    function apply(ev) {
      const kind = String(ev.kind || '');
      const p = ev.payload && typeof ev.payload === 'object' ? ev.payload : {};
      const ts = typeof ev.ts === 'number' ? ev.ts : state.lastTs;
      if (ts !== null) {
        state.lastTs = ts;
        state.lastTsAt = performance.now();
      }
      const dot = kind.lastIndexOf('.');
      const scope = dot > 0 ? kind.slice(0, dot) : kind;
      const phase = dot > 0 ? kind.slice(dot + 1) : '';

      switch (kind) {
        case 'run.started':
          state.runStart = ts;
          state.model = p.model || null;
          setStatus('running');
          if (p.continues) note('continues ' + p.continues, 'info');
          showParent(p);
          scopeStarted('run', p, ts);
          return;
        case 'run.input':
          renderInput(p.message);
          return;
        case 'model.text_delta': {
          const msg = assistantFor(p);
          msg.reasoning = null;
          appendText(msg, typeof p.text === 'string' ? p.text : '');
          return;
        }
        case 'model.reasoning_delta':
          reasoningDelta(p);
          return;
        case 'model.reasoning_end':
          reasoningEnd(p);
          return;
        case 'model.tool_call':
          toolCall(assistantFor(p), String(p.call_id || ''), String(p.name || ''), p.arguments);
          return;
        case 'tool.sub_run': {
          const call = String(p.call_id || '');
          const s = state.scopeByKey.get('tool:' + call);
          const tool = s ? s.label.replace(/^tool /, '').replace(/ · .*$/, '') : 'agent';
          addSubRun($('subruns'), String(p.run_id || ''), tool, call, 1);
          return;
        }
        default:
          break;
      }

      if (!['run', 'turn', 'model', 'tool', 'interaction'].includes(scope)) return; // unknown kind: counted only
      if (phase === 'started') {
        if (scope === 'turn') {
          state.turns += 1;
          transcript.append(el('div', { cls: 'turn-divider', text: 'turn ' + p.turn }));
        }
        if (scope === 'interaction') {
          scopeStarted(scope, p, ts);
          interaction(p);
          return;
        }
        scopeStarted(scope, p, ts);
        if (scope === 'tool') {
          const call = state.calls.get(String(p.call_id));
          if (call) setCall(call, 'running', 'running');
        }
        return;
      }
      if (!TERMINALS.has(phase)) return;

      let barState = phase;
      let detail = '';
      switch (scope) {
        case 'run': {
          state.runEnd = ts;
          state.terminal = true;
          if (p.usage && typeof p.usage === 'object') {
            state.usageIn = p.usage.input_tokens || state.usageIn;
            state.usageOut = p.usage.output_tokens || state.usageOut;
          }
          if (phase === 'failed') {
            detail = String(p.error || '');
            note('run failed: ' + detail, 'failed');
          } else if (phase === 'cancelled') {
            detail = p.reason ? String(p.reason) : '';
            note('run cancelled' + (detail ? ': ' + detail : ''), 'cancelled');
          } else {
            note('run completed', 'completed');
          }
          scopeEnded('run', p, ts, barState, detail);
          setStatus(phase);
          return;
        }
        case 'turn':
          if (phase === 'failed') {
            detail = String(p.error || '');
            note('turn ' + p.turn + ' failed: ' + detail, 'failed');
          }
          break;
        case 'model': {
          if (phase === 'completed' && p.usage && typeof p.usage === 'object') {
            state.usageIn += p.usage.input_tokens || 0;
            state.usageOut += p.usage.output_tokens || 0;
          }
          if (phase === 'failed') {
            const problem = p.problem && typeof p.problem === 'object' ? p.problem : {};
            detail = String(problem.kind || 'error') + ': ' + String(problem.message || '');
            const msg = state.messages.get(p.operation_id);
            const retry = problem.retryable ? ' (retryable)' : '';
            if (msg) {
              msg.node.classList.add('attempt-failed');
              note('this attempt failed: ' + detail + retry, 'failed', msg.body);
            } else {
              note('model call ' + p.operation_id + ' failed: ' + detail + retry, 'failed');
            }
          } else if (phase === 'cancelled') {
            const msg = state.messages.get(p.operation_id);
            if (msg) msg.node.classList.add('attempt-cancelled');
          }
          break;
        }
        case 'tool': {
          const call = state.calls.get(String(p.call_id));
          if (phase === 'completed') {
            if (call) {
              setCall(call, 'completed', 'completed', pretty(typeof p.output === 'string' ? p.output : p.output));
              appendImages(call.images, p.images);
            }
          } else if (phase === 'failed') {
            const uncertain = p.outcome === 'uncertain';
            if (uncertain) barState = 'uncertain';
            detail = String(p.error || '');
            const extra = [uncertain ? null : p.outcome, p.retry].filter((x) => typeof x === 'string').join(', ');
            const statusText = (uncertain ? 'uncertain outcome' : 'failed') + (extra ? ' (' + extra + ')' : '');
            if (call) setCall(call, barState, statusText, detail);
            else note('tool ' + (p.tool || '') + ' ' + p.call_id + ' failed: ' + detail, barState);
          } else if (call) {
            setCall(call, 'cancelled', 'cancelled');
          }
          break;
        }
        case 'interaction':
          interactionEnded(p, phase);
          if (phase === 'failed') detail = String(p.error || '');
          if (phase === 'completed') detail = String(p.decision || '');
          break;
        default:
          break;
      }
      scopeEnded(scope, p, ts, barState, detail);
    }

    // ----- the stream -----

    let controller = null;
    let retryTimer = null;
    let backoff = BACKOFF_MIN_MS;
    let waitingForToken = false;

    function applyLine(data) {
      let ev;
      try {
        ev = JSON.parse(data);
      } catch (_) {
        return 'ok'; // not an event line: ignore
      }
      if (!ev || typeof ev.seq !== 'number') return 'ok';
      if (ev.seq <= state.lastSeq) return 'ok'; // already applied
      if (ev.seq !== state.lastSeq + 1) return 'gap';
      apply(ev);
      state.lastSeq = ev.seq;
      state.count += 1;
      document.body.dataset.lastSeq = String(state.lastSeq);
      $('event-count').textContent = String(state.count);
      return 'ok';
    }

    /** Handles one dispatched SSE message; returns 'ok', 'gap', 'error' or 'shutdown'. */
    function dispatch(type, data) {
      if (type === 'error' || type === 'shutdown') {
        let doc = {};
        try {
          doc = JSON.parse(data) || {};
        } catch (_) {
          doc = {};
        }
        const title = typeof doc.title === 'string' ? doc.title : type === 'shutdown' ? 'The daemon is shutting down' : 'Stream error';
        const detail = typeof doc.detail === 'string' ? doc.detail : '';
        showNotice(title, detail, type === 'shutdown' ? 'info' : 'error');
        // Events that are gone stay gone: reconnecting would only repeat this.
        if (type === 'error' && typeof doc.type === 'string' && /cursor-expired|unknown-run/.test(doc.type)) return 'fatal';
        return type;
      }
      return applyLine(data);
    }

    function scheduleReconnect(why) {
      if (state.terminal || retryTimer) return;
      setStream('reconnecting' + (why ? ' (' + why + ')' : ''), 'reconnecting');
      const wait = backoff;
      backoff = Math.min(BACKOFF_MAX_MS, backoff * 2);
      retryTimer = setTimeout(() => {
        retryTimer = null;
        connect();
      }, wait);
    }

    function finished() {
      setStream(state.terminal ? 'ended' : 'stream closed', 'finished');
      updateStats();
      scheduleTimeline();
    }

    async function connect() {
      if (state.terminal) {
        finished();
        return;
      }
      controller = new AbortController();
      const headers = apiHeaders({ Accept: 'text/event-stream' });
      if (state.lastSeq > 0) headers['Last-Event-ID'] = String(state.lastSeq);
      let response;
      try {
        setStream(state.count > 0 ? 'reconnecting' : 'connecting', 'connecting');
        response = await fetch(base + '/events', {
          headers,
          signal: controller.signal,
          credentials: 'omit',
          cache: 'no-store',
        });
      } catch (e) {
        scheduleReconnect('network');
        return;
      }
      if (response.status === 204) {
        // The server has nothing after our cursor and the run has ended.
        finished();
        return;
      }
      if (response.status === 401) {
        waitingForToken = true;
        setStream('token needed', 'auth');
        askForToken();
        return;
      }
      if (!response.ok || !response.body) {
        const p = await problemOf(response);
        showNotice(p.title, p.detail);
        if (response.status >= 500 || response.status === 429) {
          scheduleReconnect(String(response.status));
        } else {
          setStream('stopped', 'error');
        }
        return;
      }
      const notice = $('notice');
      if (!notice.hidden && notice.dataset.kind !== 'auth') hideNotice();
      setStream('live', 'live');

      const reader = response.body.getReader();
      const decoder = new TextDecoder('utf-8');
      let buffer = '';
      let dataLines = [];
      let eventType = '';
      let outcome = 'eof';
      let appliedBefore = state.count;

      const processLine = (line) => {
        if (line === '') {
          if (dataLines.length > 0) {
            const r = dispatch(eventType || 'message', dataLines.join('\n'));
            dataLines = [];
            eventType = '';
            return r;
          }
          eventType = '';
          return 'ok';
        }
        if (line.startsWith(':')) return 'ok';
        const colon = line.indexOf(':');
        let field = line;
        let value = '';
        if (colon >= 0) {
          field = line.slice(0, colon);
          value = line.slice(colon + 1);
          if (value.startsWith(' ')) value = value.slice(1);
        }
        if (field === 'data') dataLines.push(value);
        else if (field === 'event') eventType = value;
        // `id` is the seq, which the data line carries too; `retry` is a hint
        // for EventSource, this client keeps its own small backoff.
        return 'ok';
      };

      try {
        read: for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let start = 0;
          const eol = /\r\n|\r|\n/g;
          for (;;) {
            eol.lastIndex = start;
            const m = eol.exec(buffer);
            if (!m) break;
            // A '\r' ending the buffer may be half of '\r\n': wait for more.
            if (m[0] === '\r' && m.index + 1 === buffer.length) break;
            const line = buffer.slice(start, m.index);
            start = m.index + m[0].length;
            const r = processLine(line);
            if (r !== 'ok') {
              outcome = r;
              break read;
            }
            if (state.count > appliedBefore) {
              backoff = BACKOFF_MIN_MS;
              appliedBefore = state.count;
            }
            if (state.terminal) {
              // The run's terminal is applied: nothing follows it.
              outcome = 'terminal';
              break read;
            }
          }
          buffer = buffer.slice(start);
        }
      } catch (e) {
        outcome = 'dropped';
      }
      try {
        controller.abort();
      } catch (_) {
        // already closed
      }
      controller = null;
      if (state.terminal) {
        finished();
        return;
      }
      switch (outcome) {
        case 'gap':
          scheduleReconnect('gap');
          break;
        case 'shutdown':
          backoff = Math.max(backoff, 1000);
          scheduleReconnect('daemon shutting down');
          break;
        case 'error':
          scheduleReconnect('stream error');
          break;
        case 'fatal':
          setStream('stopped', 'error');
          break;
        default:
          scheduleReconnect(outcome === 'dropped' ? 'connection dropped' : 'stream ended');
      }
    }

    // ----- buttons -----

    $('cancel').addEventListener('click', async () => {
      const button = $('cancel');
      button.disabled = true;
      button.textContent = 'Cancelling…';
      try {
        await postJson(base + '/cancel', {});
        button.textContent = 'Cancel requested';
      } catch (p) {
        showNotice(p && p.title ? p.title : 'Cancel failed', p && p.detail ? p.detail : '');
        button.textContent = 'Cancel run';
        button.disabled = TERMINALS.has(state.status);
      }
    });

    tokenListeners.push(() => {
      if (waitingForToken) {
        waitingForToken = false;
        backoff = BACKOFF_MIN_MS;
        connect();
      }
    });

    document.body.dataset.lastSeq = '0';
    connect();
    loadTree();
  }

  // ---------- routing ----------

  function main() {
    setupToken();
    const match = /^\/runs\/([^/]+)\/?$/.exec(location.pathname);
    if (match) {
      let id;
      try {
        id = decodeURIComponent(match[1]);
      } catch (_) {
        id = match[1];
      }
      document.body.dataset.page = 'run';
      startRun(id);
    } else {
      document.body.dataset.page = 'list';
      startList();
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', main);
  else main();
})();
