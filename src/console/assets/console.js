// weir console: reads the admin API (docs/api.md) with the bearer token in the
// Authorization header, never in a URL or a cookie. No inline script, no
// remote origin: the page's Content-Security-Policy forbids both.
'use strict';
(function () {
  const TOKEN_KEY = 'weir-token';
  const STATS_WINDOW = '10s';
  const POLL_MS = 2000;
  const MAX_SAMPLES = 600;
  const RUN_START = ['NewRevision', 'Started', 'Restarted'];

  const S = {
    token: sessionStorage.getItem(TOKEN_KEY),
    access: null,
    tokenRequired: false,
    page: null,
    status: null,
    canaries: [],
    stats: [],
    samples: {},
    charts: {},
    live: false,
    pollTimer: null,
    soonTimer: null,
    sseStarted: false,
    reachable: true,
    bannerTimer: null,
    fleet: null,
  };

  const $ = (id) => document.getElementById(id);

  // Builds an element; strings become text nodes (API text is never parsed as HTML).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else if (k === 'width') e.style.width = v;
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }

  // ------------------------------------------------------------ pure shaping

  const IDLE = ['Initializing', 'Initialized', 'Succeeded', 'Failed'];

  // The step plan of a status: chips with a state each (done, current, todo).
  function planChips(st) {
    const running = !IDLE.includes(st.phase);
    const promoting = ['Promoting', 'Finalising'].includes(st.phase);
    const chips = [];
    if (st.strategy === 'canary') {
      chips.push({ label: 'start', value: 0 });
      for (const w of st.weightPlan || []) chips.push({ label: w + '%', value: w });
    } else {
      for (let i = 1; i <= (st.iterationsTotal || 0); i++) chips.push({ label: '#' + i, value: i });
    }
    chips.push({ label: 'promote', value: null });
    const at = st.strategy === 'canary' ? st.canaryWeight : st.iterations;
    let current = -1;
    if (promoting) current = chips.length - 1;
    else if (running) {
      current = chips.findIndex((c) => c.value === at);
      if (current < 0) current = chips.findIndex((c) => c.value !== null && c.value > at) - 1;
      if (current < 0) current = 0;
    }
    const succeeded = st.phase === 'Succeeded';
    return chips.map((c, i) => ({
      label: c.label,
      state: i === current ? 'current' : (succeeded || (current >= 0 && i < current)) ? 'done' : 'todo',
    }));
  }

  // The events of the current (or last) run: from its last start on.
  function runEvents(events) {
    let from = 0;
    events.forEach((e, i) => { if (RUN_START.includes(e.reason)) from = i; });
    return events.slice(from);
  }

  // Countdown text for a status at browser time `now`.
  function countdown(st, now) {
    if (st.paused) return 'paused: no tick until resumed';
    if (st.nextTickMs === null || st.nextTickMs === undefined) return 'first tick due';
    const s = Math.ceil((st.nextTickMs - now) / 1000);
    return s > 0 ? 'next tick in ' + s + ' s' : 'tick due now';
  }

  // The threshold of a metric check: {min, max} or nulls.
  function range(st, name) {
    const m = (st.metrics || []).find((x) => x.name === name);
    return { min: m ? m.min : null, max: m ? m.max : null };
  }

  window.weirConsole = { planChips, runEvents, countdown, range, lastChecks, verdictClass };

  // ------------------------------------------------------------ formatting

  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(ms) {
    const d = new Date(ms);
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }
  function fmtDur(ms) {
    const s = Math.round(ms / 1000);
    if (s < 60) return s + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + pad(s % 60) + ' s';
    return Math.floor(m / 60) + ' h ' + pad(m % 60) + ' min';
  }
  const fmtNum = (v, d) => (v === null || v === undefined ? '–' : Number(v).toFixed(d));

  function badge(phase, id) { return el('span', { class: 'badge ' + phase, id: id || null }, phase); }

  function split(canaryWeight) {
    return el('div', { class: 'split', title: 'canary ' + canaryWeight + '%' },
      el('span', { width: canaryWeight + '%' }));
  }

  function banner(text, info) {
    const b = $('banner');
    clearTimeout(S.bannerTimer);
    // A success fades; a refusal or an outage stays until the next message.
    if (info && text) S.bannerTimer = setTimeout(() => banner(''), 8000);
    b.textContent = text;
    b.classList.toggle('info', !!info);
    b.classList.toggle('hidden', !text);
  }

  // ------------------------------------------------------------ API

  // X-Weir-Request marks a call of this page: the API refuses a write without it
  // (or a JSON body), which a page of another site cannot send.
  function headers(extra) {
    const h = Object.assign({ 'X-Weir-Request': '1' }, extra || {});
    if (S.token) h.Authorization = 'Bearer ' + S.token;
    return h;
  }

  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    let json = null;
    try { json = await r.json(); } catch (_) { json = null; }
    if (r.status === 401) {
      askToken(S.token ? 'The token was refused (wrong token). Enter it again.' : null);
      throw new Error('unauthorized');
    }
    return { status: r.status, ok: r.ok, json };
  }

  // ------------------------------------------------------------ access

  function askToken(error) {
    S.access = null;
    S.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $('login-error').textContent = error || '';
    $('login-error').classList.toggle('hidden', !error);
    $('token').value = '';
    if (!$('login').open) $('login').showModal();
    $('token').focus();
  }

  async function boot() {
    let r;
    try {
      r = await fetch('/api/v1/whoami', { headers: headers(), cache: 'no-store', credentials: 'omit' });
    } catch (_) {
      setReachable(false);
      setTimeout(boot, 2000);
      return;
    }
    if (r.status === 401) {
      askToken(S.token ? 'The token was refused (wrong token). Enter it again.' : null);
      return;
    }
    const who = await r.json();
    S.access = who.access;
    S.tokenRequired = who.tokenRequired;
    document.body.classList.toggle('readonly', who.access !== 'write');
    const a = $('access');
    a.textContent = who.access === 'write' ? 'read & write' : 'read only';
    a.className = 'access ' + who.access;
    $('logout').classList.toggle('hidden', !who.tokenRequired);
    if (!S.sseStarted) { S.sseStarted = true; sse(); }
    route();
  }

  // ------------------------------------------------------------ live data

  function setLive(on) {
    S.live = on;
    const l = $('live');
    l.textContent = on ? 'live' : 'reconnecting';
    l.className = 'live ' + (on ? 'on' : 'off');
  }

  function setReachable(ok) {
    if (ok && !S.reachable) banner('');
    if (!ok) banner('weir does not answer; retrying…');
    S.reachable = ok;
  }

  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

  // Server-sent events through fetch (EventSource cannot send a header), reconnected
  // with backoff when weir restarts.
  async function sse() {
    let backoff = 1000;
    for (;;) {
      if (!S.access) { await sleep(500); continue; }
      try {
        const r = await fetch('/api/v1/events', { headers: headers(), cache: 'no-store', credentials: 'omit' });
        if (r.status === 401) { askToken('The token was refused (wrong token). Enter it again.'); continue; }
        if (!r.ok || !r.body) throw new Error('HTTP ' + r.status);
        setLive(true);
        backoff = 1000;
        refreshSoon();
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            onEvent(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
        }
      } catch (_) { /* reconnect below */ }
      setLive(false);
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 15000);
    }
  }

  function onEvent(block) {
    let kind = 'message';
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) kind = line.slice(6).trim();
      else if (line.startsWith('data:')) data += line.slice(5).trim();
    }
    if (!data) return;
    if (kind === 'rollout' && S.page && S.page.canary && S.status) {
      try {
        const e = JSON.parse(data);
        if (e.canary === S.page.canary) {
          const seen = S.status.events.some((x) => x.timeMs === e.timeMs && x.reason === e.reason);
          if (!seen) S.status.events.push(e);
        }
      } catch (_) { /* a malformed event changes nothing */ }
    }
    refreshSoon();
  }

  function refreshSoon() {
    clearTimeout(S.soonTimer);
    S.soonTimer = setTimeout(refresh, 150);
  }

  function record(stats) {
    const t = Date.now();
    for (const r of stats) {
      const list = S.samples[r.route] || (S.samples[r.route] = []);
      list.push({ t, roles: r.roles });
      if (list.length > MAX_SAMPLES) list.shift();
    }
  }

  async function refresh() {
    clearTimeout(S.pollTimer);
    S.pollTimer = setTimeout(refresh, POLL_MS);
    if (!S.access || !S.page) return;
    // An answer that arrives after the page changed is dropped.
    const page = S.page;
    try {
      const st = await api('GET', '/api/v1/stats?window=' + STATS_WINDOW);
      if (st.ok) { S.stats = st.json.routes || []; record(S.stats); }
      if (S.page.canary) {
        const r = await api('GET', '/api/v1/canaries/' + encodeURIComponent(S.page.canary));
        if (S.page !== page) return;
        if (r.status === 404) { view(el('p', { class: 'error' }, 'No canary named ' + S.page.canary)); return; }
        if (r.ok) { S.status = r.json; drawCanary(); }
      } else {
        const r = await api('GET', '/api/v1/canaries');
        const f = await api('GET', '/api/v1/cluster');
        if (S.page !== page) return;
        if (f.ok) S.fleet = f.json.enabled ? f.json : null;
        if (r.ok) { S.canaries = r.json.canaries; drawOverview(); }
      }
      setReachable(true);
    } catch (e) {
      if (e.message !== 'unauthorized') setReachable(false);
    }
  }

  // ------------------------------------------------------------ pages

  function view(...kids) {
    const v = $('view');
    v.replaceChildren(...kids);
  }

  function route() {
    const m = location.hash.match(/^#\/canary\/(.+)$/);
    destroyCharts();
    S.status = null;
    S.page = m ? { canary: decodeURIComponent(m[1]) } : { overview: true };
    const crumbs = $('crumbs');
    crumbs.replaceChildren(m ? el('span', {}, el('a', { href: '#/' }, 'overview'), ' / ', S.page.canary) : 'overview');
    if (m) buildCanary(); else view(el('p', { class: 'muted' }, 'Loading…'));
    refresh();
  }

  function slotCell(backend, revision) {
    return el('td', {}, backend || '–', revision ? el('div', { class: 'muted' }, revision) : null);
  }

  // An Inconclusive check is neither a pass nor a failure: the step is held.
  function verdictClass(c) { return c.passed ? 'pass' : (c.inconclusive ? 'held' : 'fail'); }
  function verdictMark(c) { return c.passed ? '✓ ' : (c.inconclusive ? '… ' : '✗ '); }
  function evidence(c) {
    return 'inconclusive, evidence ' + (c.evidence == null ? '–' : Math.round(100 * c.evidence) + '%');
  }

  function lastChecks(st) {
    const ms = (st.lastChecks && st.lastChecks.metrics) || [];
    if (!ms.length) return el('span', { class: 'muted' }, 'none yet');
    return el('span', {}, ms.map((m) => el('div', { class: verdictClass(m), title: m.reason || '' },
      verdictMark(m) + m.name + ' ' + (m.inconclusive ? evidence(m) : fmtNum(m.value, 2)))));
  }

  function drawOverview() {
    const rows = S.canaries.map((c) => el('tr', { 'data-canary': c.name },
      el('td', {}, el('a', { href: '#/canary/' + encodeURIComponent(c.name) }, c.name)),
      el('td', {}, badge(c.phase), c.paused ? el('span', { class: 'badge paused' }, ' paused') : null),
      el('td', { class: 'hide-narrow' }, c.strategy),
      el('td', {}, split(c.canaryWeight), el('div', { class: 'muted' }, c.canaryWeight + '% canary')),
      slotCell(c.primaryBackend, c.promotedRevision),
      slotCell(c.canaryBackend, c.phase === 'Succeeded' ? null : c.revision),
      el('td', {}, lastChecks(c))));
    const routes = S.stats.map((r) => {
      const rps = (role) => fmtNum(r.roles && r.roles[role] ? r.roles[role].rps : null, 1);
      return el('tr', { 'data-route': r.route },
        el('td', {}, r.route),
        el('td', {}, split(r.canaryWeight || 0),
          el('div', { class: 'muted' }, (100 - (r.canaryWeight || 0)) + ' / ' + (r.canaryWeight || 0))),
        el('td', { class: 'hide-narrow' }, r.primary || '–', ' / ', r.canary || '–'),
        el('td', { class: 'num legend-p' }, rps('primary')),
        el('td', { class: 'num legend-c' }, rps('canary')),
        el('td', { class: 'num hide-narrow' }, rps('mirror')));
    });
    view(
      el('h1', {}, 'Canaries'),
      el('section', { class: 'card scroll' }, S.canaries.length ? el('table', { id: 'canaries' },
        el('thead', {}, el('tr', {}, ['canary', 'phase', 'strategy', 'weight', 'primary slot', 'canary slot', 'last check']
          .map((h, i) => el('th', { class: i === 2 ? 'hide-narrow' : null }, h)))),
        el('tbody', {}, rows)) : el('p', { class: 'muted' }, 'No canaries configured.')),
      el('h1', {}, 'Routes'),
      el('section', { class: 'card scroll' }, el('table', { id: 'routes' },
        el('thead', {}, el('tr', {},
          el('th', {}, 'route'), el('th', {}, 'split primary / canary'), el('th', { class: 'hide-narrow' }, 'backends'),
          el('th', {}, 'rps primary'), el('th', {}, 'rps canary'), el('th', { class: 'hide-narrow' }, 'rps mirror'))),
        el('tbody', {}, routes)),
      el('p', { class: 'muted' }, 'Requests per second over the last ' + STATS_WINDOW + '.'),
      fleet()));
  }

  // In a fleet: every member with the routing-table version it applied and how long
  // it has kept a step of a canary driven here waiting.
  function fleet() {
    const f = S.fleet;
    if (!f) return null;
    const rows = (f.members || []).map((m) => el('tr', { 'data-member': m.name, class: m.lagMs > 0 ? 'lagging' : null },
      el('td', {}, m.name, m.name === f.replica ? el('span', { class: 'muted' }, ' (this replica)') : null),
      el('td', { class: 'num' }, m.tableVersion == null ? '–' : String(m.tableVersion)),
      el('td', { class: 'num' + (m.lagMs > 0 ? ' fail' : '') }, m.lagMs > 0 ? fmtNum(m.lagMs / 1000, 1) + ' s' : '–'),
      el('td', {}, (m.waiting || []).join(', ') || '–'),
      el('td', { class: m.trusted ? null : 'fail' }, m.trusted ? 'yes' : 'not trusted'),
      el('td', { class: 'hide-narrow' }, m.apiUrl)));
    const refused = (f.refusedPeers || []).map((r) => el('li', { class: 'fail' }, r.name + ' (' + r.apiUrl + '): ' + r.reason));
    return el('div', { id: 'fleet' },
      el('h1', {}, 'Fleet'),
      el('section', { class: 'card scroll' }, el('table', { id: 'members' },
        el('thead', {}, el('tr', {}, ['member', 'table version', 'lag', 'waited for by', 'peer', 'control API']
          .map((h, i) => el('th', { class: i === 5 ? 'hide-narrow' : null }, h)))),
        el('tbody', {}, rows)),
        refused.length ? el('div', {}, el('p', {}, 'Refused member records'), el('ul', { id: 'refused' }, refused)) : null));
  }

  // The canary page: built once, then updated in place (the charts keep their canvas).
  function buildCanary() {
    const name = S.page.canary;
    const cmd = (c, label, cls) => el('button', {
      type: 'button', class: cls || null, 'data-cmd': c, on: { click: () => command(c) },
    }, label);
    const actions = S.access === 'write' ? el('div', { class: 'actions', id: 'actions' },
      cmd('start', 'Start…'), cmd('promote', 'Promote'), cmd('pause', 'Pause', 'ghost'),
      cmd('resume', 'Resume', 'ghost'), cmd('abort', 'Abort', 'danger')) : null;
    const chart = (id, title) => el('section', { class: 'card' }, el('h2', {}, title),
      el('div', { class: 'chart-box' }, el('canvas', { id: 'chart-' + id })));
    view(
      el('h1', {}, name, el('span', { id: 'badges' })),
      el('section', { class: 'card' },
        el('div', { class: 'plan', id: 'plan' }),
        el('div', { class: 'countdown', id: 'countdown' }),
        el('p', { id: 'message', class: 'muted' }),
        actions),
      el('div', { class: 'grid' },
        el('section', { class: 'card' }, el('h2', {}, 'Status'), el('dl', { class: 'kv', id: 'kv' })),
        chart('weights', 'Weight (canary, primary)'),
        chart('success', 'Success rate % (last ' + STATS_WINDOW + ')'),
        chart('latency', 'P99 latency ms (last ' + STATS_WINDOW + ')'),
        chart('failed', 'Failed checks against the threshold'),
        el('section', { class: 'card scroll' }, el('h2', {}, 'Check values'), el('table', { id: 'checks' }))),
      el('div', { class: 'grid' },
        el('section', { class: 'card' }, el('h2', {}, 'Events (newest first)'), el('ul', { class: 'timeline', id: 'timeline' })),
        el('section', { class: 'card scroll' }, el('h2', {}, 'Run history'), el('table', { id: 'history' }))));
    if (typeof Chart === 'undefined') return;
    const base = (extra) => ({
      type: 'line',
      data: { datasets: [] },
      options: Object.assign({
        animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
        interaction: { mode: 'nearest', intersect: false },
        plugins: { legend: { labels: { boxWidth: 12 } } },
        scales: {
          x: { type: 'linear', ticks: { maxTicksLimit: 6, callback: (v) => (v % 1000 === 0 ? fmtTime(v) : '') } },
          y: extra && extra.y ? extra.y : { beginAtZero: true },
        },
      }, {}),
    });
    const make = (id, cfg) => { S.charts[id] = new Chart($('chart-' + id), cfg); };
    make('weights', base({ y: { min: 0, max: 100 } }));
    make('success', base({ y: { suggestedMin: 90, suggestedMax: 100 } }));
    make('latency', base());
    make('failed', base({ y: { beginAtZero: true, ticks: { precision: 0 } } }));
  }

  function destroyCharts() {
    for (const c of Object.values(S.charts)) c.destroy();
    S.charts = {};
  }

  const COLORS = { canary: '#e8872b', primary: '#3b6fd8', threshold: '#d23f3f' };
  function series(label, color, data, extra) {
    return Object.assign({ label, data, borderColor: color, backgroundColor: color, borderWidth: 2, pointRadius: 2, spanGaps: true }, extra || {});
  }
  function thresholdLine(label, value, xs) {
    if (value === null || value === undefined || xs.length === 0) return null;
    const lo = Math.min(...xs);
    const hi = Math.max(...xs);
    return series(label, COLORS.threshold, [{ x: lo, y: value }, { x: hi, y: value }], { borderDash: [6, 4], pointRadius: 0, borderWidth: 1.5 });
  }

  function setData(id, datasets) {
    const c = S.charts[id];
    if (!c) return;
    c.data.datasets = datasets.filter(Boolean);
    c.update('none');
  }

  function drawCanary() {
    const st = S.status;
    if (!st || !$('plan')) return;
    $('badges').replaceChildren(...[badge(st.phase, 'phase'),
      st.paused ? el('span', { class: 'badge paused', id: 'paused' }, 'paused') : null].filter(Boolean));
    $('plan').replaceChildren(...planChips(st).flatMap((c, i) => [
      i ? el('span', { class: 'arrow' }, '→') : null,
      el('span', { class: 'step ' + c.state }, c.label)]).filter(Boolean));
    $('message').textContent = st.message || '';
    tick();
    const kv = [
      ['strategy', st.strategy + ' · ' + st.promotion],
      ['weight', st.canaryWeight + '% canary · ' + st.primaryWeight + '% primary'],
      ['primary slot', (st.primaryBackend || '–') + (st.promotedRevision ? ' · ' + st.promotedRevision : '')],
      ['canary slot', (st.canaryBackend || '–') + (st.revision ? ' · ' + st.revision : '')],
      ['failed checks', st.failedChecks + ' of ' + st.threshold],
      ['interval', fmtDur(st.intervalMs)],
    ];
    if (st.dataPlaneError) kv.push(['data plane', st.dataPlaneError]);
    $('kv').replaceChildren(...kv.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));

    const run = runEvents(st.events || []);
    const now = Date.now();
    const weights = run.map((e) => ({ x: e.timeMs, y: e.canaryWeight }));
    if (weights.length) weights.push({ x: Math.max(now, weights[weights.length - 1].x), y: st.canaryWeight });
    setData('weights', [
      series('canary', COLORS.canary, weights, { stepped: true }),
      series('primary', COLORS.primary, weights.map((p) => ({ x: p.x, y: 100 - p.y })), { stepped: true }),
    ]);
    const samples = (S.samples[st.route] || []).filter((s) => !run.length || s.t >= run[0].timeMs - 60000);
    const pick = (role, f) => samples.map((s) => ({ x: s.t, y: s.roles && s.roles[role] ? s.roles[role][f] : null }));
    const xs = samples.map((s) => s.t);
    setData('success', [series('canary', COLORS.canary, pick('canary', 'successRate')),
      series('primary', COLORS.primary, pick('primary', 'successRate')),
      thresholdLine('threshold (min)', range(st, 'request-success-rate').min, xs)]);
    setData('latency', [series('canary', COLORS.canary, pick('canary', 'p99Ms')),
      series('primary', COLORS.primary, pick('primary', 'p99Ms')),
      thresholdLine('threshold (max)', range(st, 'request-duration').max, xs)]);
    const failed = run.map((e) => ({ x: e.timeMs, y: e.failedChecks }));
    setData('failed', [series('failed checks', COLORS.canary, failed, { stepped: true }),
      thresholdLine('threshold', st.threshold, failed.map((p) => p.x))]);

    const checks = [];
    for (const e of run.slice().reverse()) for (const c of e.checks || []) checks.push([e.timeMs, c]);
    $('checks').replaceChildren(
      el('thead', {}, el('tr', {}, el('th', {}, 'time'), el('th', {}, 'check'), el('th', {}, 'value'), el('th', { class: 'hide-narrow' }, 'reason'))),
      el('tbody', {}, checks.length ? checks.slice(0, 40).map(([t, c]) => el('tr', { class: verdictClass(c) },
        el('td', { class: 'num' }, fmtTime(t)), el('td', {}, verdictMark(c) + c.name),
        el('td', { class: 'num' }, c.inconclusive ? evidence(c) : fmtNum(c.value, 2)), el('td', { class: 'hide-narrow' }, c.reason)))
        : el('tr', { class: 'empty' }, el('td', { colspan: '4', class: 'muted' }, 'No check measured in this run yet.'))));

    $('timeline').replaceChildren(...(st.events || []).slice().reverse().map((e) =>
      el('li', { class: (e.warning ? 'warning ' : '') + e.reason },
        el('span', { class: 'when' }, fmtTime(e.timeMs)),
        el('span', { class: 'reason' }, e.reason),
        el('span', { class: 'badge ' + e.phase }, e.phase),
        el('span', { class: 'msg' }, e.message))));

    const hist = (st.history || []).slice().reverse();
    $('history').replaceChildren(
      el('thead', {}, el('tr', {}, el('th', {}, 'revision'), el('th', {}, 'result'), el('th', {}, 'duration'),
        el('th', { class: 'hide-narrow' }, 'finished'), el('th', {}, 'reason'))),
      el('tbody', {}, hist.length ? hist.map((h) => el('tr', {},
        el('td', {}, h.revision || '–'), el('td', {}, el('span', { class: 'badge ' + h.result }, h.result)),
        el('td', { class: 'num' }, fmtDur(h.finishedMs - h.startedMs)),
        el('td', { class: 'num hide-narrow' }, fmtTime(h.finishedMs)), el('td', {}, h.reason)))
        : el('tr', {}, el('td', { colspan: '5', class: 'muted' }, 'No finished run yet.'))));
  }

  function tick() {
    if (S.status && $('countdown')) $('countdown').textContent = countdown(S.status, Date.now());
  }

  // ------------------------------------------------------------ commands

  function ask(title, text, withInput, okLabel, danger) {
    return new Promise((resolve) => {
      const d = $('confirm');
      $('confirm-title').textContent = title;
      $('confirm-text').textContent = text;
      const input = $('confirm-input');
      input.value = '';
      input.classList.toggle('hidden', !withInput);
      input.required = !!withInput;
      const ok = $('confirm-ok');
      ok.textContent = okLabel;
      ok.className = danger ? 'danger' : '';
      const done = (v) => {
        $('confirm-form').onsubmit = null;
        $('confirm-cancel').onclick = null;
        d.onclose = null;
        if (d.open) d.close();
        resolve(v);
      };
      $('confirm-form').onsubmit = (ev) => {
        ev.preventDefault();
        if (withInput && !input.value.trim()) return;
        done(withInput ? input.value.trim() : true);
      };
      $('confirm-cancel').onclick = () => done(null);
      d.onclose = () => done(null);
      d.showModal();
      if (withInput) input.focus();
    });
  }

  async function command(c) {
    const name = S.page.canary;
    let body = {};
    if (c === 'start') {
      const rev = await ask('Start a run of ' + name, 'The revision label of the new run (a run in progress starts over).', true, 'Start');
      if (rev === null) return;
      body = { revision: rev };
    } else if (c === 'promote') {
      if (await ask('Promote ' + name + '?', 'Skips the rest of the analysis and makes the canary the primary. This cannot be undone.', false, 'Promote', true) === null) return;
    } else if (c === 'abort') {
      if (await ask('Abort ' + name + '?', 'Rolls the run back: all traffic returns to the primary. This cannot be undone.', false, 'Abort', true) === null) return;
    }
    try {
      const r = await api('POST', '/api/v1/canaries/' + encodeURIComponent(name) + '/' + c, body);
      if (r.ok) {
        banner(r.json && r.json.message ? r.json.message : c + ' accepted', true);
        if (r.json && r.json.status) { S.status = r.json.status; drawCanary(); }
      } else {
        const j = r.json || {};
        banner('Refused (' + r.status + (j.error ? ' ' + j.error : '') + '): ' + (j.reason || 'no reason given'));
      }
    } catch (e) {
      if (e.message !== 'unauthorized') banner('The command could not be sent: ' + e.message);
    }
    refreshSoon();
  }

  // ------------------------------------------------------------ start

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      if (!t) return;
      S.token = t;
      sessionStorage.setItem(TOKEN_KEY, t);
      $('login').close();
      boot();
    });
    // The token is needed: Escape does not dismiss the question.
    $('login').addEventListener('cancel', (ev) => ev.preventDefault());
    $('logout').addEventListener('click', () => askToken(null));
    window.addEventListener('hashchange', () => { if (S.access) route(); });
    setInterval(tick, 500);
    boot();
  });
})();
