// skiff console: one page over /api/v1, routed by the URL's hash. No dependencies and no build
// step, because the broker embeds this file as it is.
//
// Every value from the broker (topic names, message bodies, properties) is untrusted: the DOM
// is built with textContent and attributes only, never innerHTML.
'use strict';

const API = '/api/v1';
// Live figures are fetched again this often; `?refresh_ms=N` in the page's address (before the
// #) changes it, 1 s at least.
const REFRESH_MS = Math.max(1000, Number(new URLSearchParams(location.search).get('refresh_ms')) || 10000);
// Messages one browse lists at most: the API answers no more (MAX_BROWSE in messages.rs).
const MAX_BROWSE = 200;
const TAIL_KEEP = 200;

// ---- DOM and formatting helpers --------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === 'text') el.textContent = v;
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) if (c) el.append(c);
  return el;
}

// Path segments are encoded whole: topic names such as %RETRY%G carry '%'.
const enc = encodeURIComponent;
const topicHref = (t) => '#/topics/' + enc(t);
const groupHref = (g) => '#/groups/' + enc(g);
const messageHref = (id) => '#/messages/' + enc(id);

function fmtInt(n) {
  return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US');
}

function fmtRate(n) {
  if (n === null || n === undefined) return '–';
  return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

function fmtBytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : 1)) + ' ' + units[i];
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined) return '–';
  let sec = Math.floor(ms / 1000);
  const parts = [];
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    const n = Math.floor(sec / size);
    sec -= n * size;
    if (n || (unit === 's' && !parts.length)) parts.push(n + unit);
  }
  // The two largest units read well; seconds of a day-long uptime are noise.
  return parts.slice(0, 2).join(' ');
}

const pad = (n, w = 2) => String(n).padStart(w, '0');

// The browser's zone at a time, as its offset from UTC: a time copied off the page then names
// one instant, whoever reads it.
function zoneOf(d) {
  const off = -d.getTimezoneOffset();
  if (off === 0) return 'UTC';
  const a = Math.abs(off);
  return `UTC${off > 0 ? '+' : '-'}${pad(Math.floor(a / 60))}:${pad(a % 60)}`;
}

// Local time, to the second (or millisecond), with its zone.
function fmtTime(ms, withMs) {
  if (!ms) return '–';
  const d = new Date(ms);
  const base = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return (withMs ? `${base}.${pad(d.getMilliseconds(), 3)}` : base) + ' ' + zoneOf(d);
}

// A time for a table cell: the date and the time of day each kept on one line, so a narrow
// column breaks it between them and nowhere else.
function timeNode(ms, withMs) {
  const text = fmtTime(ms, withMs);
  const cut = text.indexOf(' ');
  if (cut < 0) return text;
  return h('span', { class: 'time' }, h('span', {}, text.slice(0, cut)), ' ', h('span', {}, text.slice(cut + 1)));
}

// The time of day only, with its zone (the live tail's rows).
function fmtTimeOfDay(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zoneOf(d)}`;
}

function fmtClock(ms) {
  const d = new Date(ms);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// A numeric cell: formatted for reading, the exact value in data-value for scripts.
function num(value, attrs) {
  return h('td', Object.assign({ class: 'num', 'data-value': value ?? '' }, attrs || {}), fmtInt(value));
}

function table(id, headers, rows, empty) {
  const head = h('tr', {}, headers.map((c) => {
    const [label, numeric, cls] = Array.isArray(c) ? c : [c, false];
    return h('th', { class: [numeric ? 'num' : null, cls].filter(Boolean).join(' ') || null }, label);
  }));
  const body = h('tbody', {}, rows);
  if (!rows.length) {
    body.append(h('tr', { class: 'empty' }, h('td', { colspan: headers.length }, empty || 'None.')));
  }
  return h('table', { id, 'data-testid': id }, h('thead', {}, head), body);
}

function badge(text, kind) {
  return h('span', { class: 'badge' + (kind ? ' badge-' + kind : '') }, text);
}

function section(title, id, ...children) {
  return h('section', { class: 'panel', id }, title ? h('h2', {}, title) : null, children);
}

function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'label' }, label), input,
    hint ? h('span', { class: 'hint' }, hint) : null);
}

// ---- errors and notices -----------------------------------------------------------------------

function showError(message) {
  const el = document.getElementById('error');
  el.textContent = message;
  el.hidden = false;
}

function showNotice(message) {
  const el = document.getElementById('notice');
  el.textContent = message;
  el.hidden = false;
}

function clearMessages() {
  for (const id of ['error', 'notice']) {
    const el = document.getElementById(id);
    el.hidden = true;
    el.textContent = '';
  }
}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function describe(err) {
  if (err instanceof ApiError) return `Error ${err.status}: ${err.message}`;
  return `Error: ${err && err.message ? err.message : err}`;
}

// ---- the API ----------------------------------------------------------------------------------

async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' } };
  // The broker refuses state changes without this header: a cross-site form cannot set it.
  if (method !== 'GET') init.headers['X-Skiff-Console'] = '1';
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(API + path, init);
  } catch (e) {
    throw new ApiError(0, 'broker unreachable (' + e.message + ')');
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (e) { data = null; }
  }
  if (!res.ok) {
    const message = data && typeof data.error === 'string' ? data.error : (text || res.statusText);
    throw new ApiError(res.status, message);
  }
  return data;
}

// ---- charts -----------------------------------------------------------------------------------

// Round up to 1, 2 or 5 times a power of ten, so the y axis has readable ticks.
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmtTick(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + 'k';
  return Number.isInteger(v) ? String(v) : v.toFixed(v < 1 ? 2 : 1);
}

// A line chart of time series: series = [{name, color, points: [[at_ms, value], ...]}].
function lineChart(id, series, opts) {
  const W = 560, H = 210;
  const m = { l: 46, r: 14, t: 12, b: 26 };
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  const all = series.flatMap((sr) => sr.points);
  const svg = s('svg', {
    id, 'data-testid': id, class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': opts.title, 'data-points': all.length,
  });
  if (!all.length) {
    svg.append(s('rect', { x: m.l, y: m.t, width: pw, height: ph, class: 'plot' }));
    svg.append(s('text', { x: m.l + pw / 2, y: m.t + ph / 2, class: 'nodata', 'text-anchor': 'middle',
      text: 'no samples yet' }));
    return svg;
  }
  let x0 = Math.min(...all.map((p) => p[0]));
  let x1 = Math.max(...all.map((p) => p[0]));
  if (x1 - x0 < 60000) x0 = x1 - 60000; // at least a minute wide, so one sample is not a wall
  // Counts (lag) get whole-number ticks: four equal steps of a round whole number.
  const top = Math.max(...all.map((p) => p[1]));
  const yMax = opts.integer ? 4 * Math.max(1, niceCeil(Math.ceil(top / 4))) : niceCeil(top);
  const X = (t) => m.l + ((t - x0) / (x1 - x0)) * pw;
  const Y = (v) => m.t + ph - (v / yMax) * ph;

  svg.append(s('rect', { x: m.l, y: m.t, width: pw, height: ph, class: 'plot' }));
  for (let i = 0; i <= 4; i++) {
    const v = (yMax / 4) * i;
    const y = Y(v);
    svg.append(s('line', { x1: m.l, x2: m.l + pw, y1: y, y2: y, class: 'grid' }));
    svg.append(s('text', { x: m.l - 6, y: y + 4, 'text-anchor': 'end', class: 'tick', 'data-axis': 'y', text: fmtTick(v) }));
  }
  const span = x1 - x0;
  const step = [60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3].find((st) => span / st <= 6) || span / 5;
  for (let t = Math.ceil(x0 / step) * step; t <= x1; t += step) {
    const x = X(t);
    svg.append(s('line', { x1: x, x2: x, y1: m.t + ph, y2: m.t + ph + 4, class: 'axis' }));
    svg.append(s('text', { x, y: H - 8, 'text-anchor': 'middle', class: 'tick', text: fmtClock(t) }));
  }
  svg.append(s('line', { x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph, class: 'axis' }));
  svg.append(s('text', { x: W - m.r, y: m.t + 12, 'text-anchor': 'end', class: 'tick zone', text: zoneOf(new Date(x1)) }));

  for (const sr of series) {
    if (!sr.points.length) continue;
    const pts = sr.points.map(([t, v]) => [X(t), Y(v)]);
    const line = pts.map(([x, y], i) => (i ? 'L' : 'M') + x.toFixed(1) + ' ' + y.toFixed(1)).join(' ');
    const area = `${line} L${pts[pts.length - 1][0].toFixed(1)} ${m.t + ph} L${pts[0][0].toFixed(1)} ${m.t + ph} Z`;
    svg.append(s('path', { d: area, class: 'area', fill: sr.color }));
    svg.append(s('path', { d: line, class: 'line', stroke: sr.color, 'data-series': sr.name }));
    const [lx, ly] = pts[pts.length - 1];
    svg.append(s('circle', { cx: lx, cy: ly, r: 3, fill: sr.color },
      s('title', { text: `${sr.name}: ${fmtRate(sr.points[sr.points.length - 1][1])}` })));
  }
  return svg;
}

function chartPanel(title, id, series, current) {
  return h('div', { class: 'chart-box' },
    h('div', { class: 'chart-head' }, h('h3', {}, title),
      current !== undefined ? h('span', { class: 'chart-now', id: id + '-now' }, current) : null),
    lineChart(id, series, { title }));
}

// ---- routing ------------------------------------------------------------------------------------

// Work a view leaves running (timers, event streams), stopped when the route changes.
let cleanups = [];
let generation = 0;

function onLeave(fn) { cleanups.push(fn); }

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  const parts = path.split('/').filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch (e) { return p; }
  });
  return { parts, params };
}

const routes = [
  { match: (p) => p.length === 0, nav: 'overview', view: overviewView },
  { match: (p) => p.length === 1 && p[0] === 'topics', nav: 'topics', view: topicsView },
  { match: (p) => p.length === 2 && p[0] === 'topics', nav: 'topics', view: (r) => topicView(r.parts[1]) },
  { match: (p) => p.length === 1 && p[0] === 'groups', nav: 'groups', view: groupsView },
  { match: (p) => p.length === 2 && p[0] === 'groups', nav: 'groups', view: (r) => groupView(r.parts[1]) },
  { match: (p) => p.length === 1 && p[0] === 'messages', nav: 'messages', view: (r) => messagesView(r.params) },
  { match: (p) => p.length === 2 && p[0] === 'messages', nav: 'messages', view: (r) => messageView(r.parts[1]) },
  { match: (p) => p.length === 2 && p[0] === 'traces', nav: 'messages', view: (r) => traceView(r.parts[1], r.params) },
];

async function route() {
  for (const fn of cleanups) { try { fn(); } catch (e) { /* already stopped */ } }
  cleanups = [];
  const gen = ++generation;
  clearMessages();
  const r = parseHash();
  const found = routes.find((x) => x.match(r.parts));
  for (const a of document.querySelectorAll('[data-nav]')) {
    a.classList.toggle('active', !!found && a.dataset.nav === found.nav);
  }
  const view = document.getElementById('view');
  view.dataset.route = found ? found.nav : 'unknown';
  view.dataset.state = 'loading';
  view.replaceChildren(h('p', { class: 'loading' }, 'Loading…'));
  if (!found) {
    view.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, 'No page at ' + location.hash + '.'));
    view.dataset.state = 'ready';
    return;
  }
  try {
    const content = await found.view(r);
    if (gen !== generation) return; // the user moved on while this loaded
    // Through `append`, which skips the null and false a view leaves for what it does not show:
    // handed to replaceChildren they would be rendered as the text "null".
    view.replaceChildren();
    append(view, [content]);
    view.dataset.state = 'ready';
  } catch (err) {
    if (gen !== generation) return;
    view.replaceChildren(h('p', { class: 'muted' }, 'This page could not be loaded.'));
    view.dataset.state = 'error';
    showError(describe(err));
  }
}

// Counts the view's refreshes in data-refreshes, so a script can tell one happened.
function countRefresh() {
  const view = document.getElementById('view');
  view.dataset.refreshes = String(Number(view.dataset.refreshes || 0) + 1);
}

// Re-renders the current view in place every REFRESH_MS until the route changes (a page with
// no form to lose).
function autoRefresh(render) {
  const gen = generation;
  const timer = setInterval(async () => {
    try {
      const content = await render();
      if (gen !== generation) return;
      const view = document.getElementById('view');
      view.replaceChildren();
      append(view, [content]);
      countRefresh();
    } catch (err) {
      if (gen === generation) showError(describe(err));
    }
  }, REFRESH_MS);
  onLeave(() => clearInterval(timer));
}

// The live parts of a page with forms: `load` fetches the page's figures, and each part made
// with the returned function renders from them, now from `first` and again every REFRESH_MS,
// in place; the forms around them keep what was typed. A part's box has `display: contents`,
// so it does not change the layout.
function liveParts(load, first) {
  const parts = [];
  const gen = generation;
  const timer = setInterval(async () => {
    try {
      const data = await load();
      if (gen !== generation) return;
      for (const [box, render] of parts) {
        box.replaceChildren();
        append(box, [render(data)]);
      }
      countRefresh();
    } catch (err) {
      if (gen === generation) showError(describe(err));
    }
  }, REFRESH_MS);
  onLeave(() => clearInterval(timer));
  return (render) => {
    const box = h('div', { class: 'live' });
    append(box, [render(first)]);
    parts.push([box, render]);
    return box;
  };
}

// Runs a form's action with its submit button disabled, showing the outcome.
async function submitting(form, action) {
  const buttons = form.querySelectorAll('button');
  buttons.forEach((b) => { b.disabled = true; });
  clearMessages();
  try {
    await action();
  } catch (err) {
    showError(describe(err));
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

// ---- overview -------------------------------------------------------------------------------------

async function overviewView() {
  const render = async () => renderOverview(await api('GET', '/overview'));
  autoRefresh(render);
  return render();
}

function renderOverview(o) {
  document.title = `${o.broker_name} · skiff console`;
  setBrokerFoot(o);
  const disk = o.disk || {};
  const conns = o.connections || {};
  const rates = o.rates || [];
  const last = rates.length ? rates[rates.length - 1] : null;

  const stat = (label, id, value, sub) => h('div', { class: 'stat' },
    h('div', { class: 'stat-label' }, label),
    h('div', { class: 'stat-value', id, 'data-testid': id }, value),
    sub ? h('div', { class: 'stat-sub' }, sub) : null);

  const ratio = (r) => Math.max(0, Math.min(1, Number(r) || 0));
  const used = ratio(disk.used_ratio);
  const level = used >= ratio(disk.full_ratio) ? 'full' : used >= ratio(disk.max_used_ratio) ? 'high' : 'ok';
  const marker = (r, label) => h('div', { class: 'disk-mark', style: `left:${(ratio(r) * 100).toFixed(2)}%`, title: label },
    h('span', {}, label));
  const diskBar = h('div', { class: 'disk-bar', id: 'disk-bar', 'data-testid': 'disk-bar',
    'data-used-ratio': disk.used_ratio, role: 'meter', 'aria-valuemin': 0, 'aria-valuemax': 1,
    'aria-valuenow': disk.used_ratio },
    h('div', { class: 'disk-fill disk-' + level, style: `width:${(used * 100).toFixed(2)}%` }),
    // skiff's own share of what is used, drawn over it.
    h('div', { class: 'disk-fill disk-store', id: 'disk-store-bar', title: "skiff's store",
      style: `width:${(ratio(Number(disk.store_bytes) / Math.max(1, Number(disk.total_bytes))) * 100).toFixed(2)}%` }),
    disk.max_used_ratio !== undefined ? marker(disk.max_used_ratio, `clean up ${(disk.max_used_ratio * 100).toFixed(0)}%`) : null,
    disk.full_ratio !== undefined ? marker(disk.full_ratio, `full ${(disk.full_ratio * 100).toFixed(0)}%`) : null);

  const countTable = (id, head, map) => table(id, [head, ['Connections', true]],
    Object.entries(map || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
      .map(([k, v]) => h('tr', { 'data-key': k }, h('td', {}, k), num(v))), 'No connections.');

  return [
    h('header', { class: 'page-head' },
      h('h1', {}, 'Overview'),
      h('p', { class: 'muted' }, `${o.broker_name} in ${o.cluster_name} on ${o.listen}`)),
    h('div', { class: 'stats' },
      stat('Version', 'overview-version', o.version),
      stat('Broker', 'overview-broker', o.broker_name, o.cluster_name),
      stat('Uptime', 'overview-uptime', fmtDuration(o.uptime_ms)),
      stat('Topics', 'overview-topics', fmtInt(o.topics)),
      stat('Groups', 'overview-groups', fmtInt(o.groups)),
      stat('Connections', 'overview-connections', fmtInt(conns.total))),
    section('Disk', 'disk',
      h('p', { class: 'disk-store-line' }, h('span', { class: 'swatch store' }), "skiff's store: ",
        h('strong', { id: 'disk-store', 'data-testid': 'disk-store', 'data-value': disk.store_bytes ?? '' }, fmtBytes(disk.store_bytes)),
        h('span', { class: 'muted' }, ' (commit log, queues and indexes in the data directory)')),
      diskBar,
      h('p', { id: 'disk-text', 'data-testid': 'disk-text', class: 'disk-text' },
        h('span', { class: 'swatch used' }),
        h('strong', {}, `Filesystem: ${fmtBytes(disk.used_bytes)} of ${fmtBytes(disk.total_bytes)} used`),
        ` (${((Number(disk.used_ratio) || 0) * 100).toFixed(1)}%) · old files deleted past `,
        `${((disk.max_used_ratio || 0) * 100).toFixed(0)}% or after ${fmtDuration(disk.retention_ms)}`,
        ` · writes refused past ${((disk.full_ratio || 0) * 100).toFixed(0)}%`),
      h('p', { class: 'muted small' }, 'Data directory ', h('code', {}, disk.data_dir || '–'))),
    h('div', { class: 'charts' },
      chartPanel('Produced / s', 'chart-produced',
        [{ name: 'produced/s', color: '#2563eb', points: rates.map((r) => [r.at_ms, r.produced_per_s]) }],
        last ? fmtRate(last.produced_per_s) + ' now' : ''),
      chartPanel('Consumed / s', 'chart-consumed',
        [{ name: 'consumed/s', color: '#059669', points: rates.map((r) => [r.at_ms, r.consumed_per_s]) }],
        last ? fmtRate(last.consumed_per_s) + ' now' : '')),
    h('div', { class: 'cols' },
      section('Connections by protocol', 'connections-protocol',
        countTable('conn-by-protocol', 'Protocol', conns.by_protocol)),
      section('Connections by language', 'connections-language',
        countTable('conn-by-language', 'Language', conns.by_language))),
  ];
}

function setBrokerFoot(o) {
  const foot = document.getElementById('nav-broker');
  foot.replaceChildren(h('div', {}, o.broker_name), h('div', { class: 'muted' }, 'skiff ' + o.version));
}

// ---- topics ----------------------------------------------------------------------------------------

const MESSAGE_TYPES = ['NORMAL', 'FIFO', 'DELAY', 'TRANSACTION'];
let showSystemTopics = false;

async function topicsView() {
  const load = () => api('GET', '/topics');
  const first = await load();
  document.title = 'Topics · skiff console';
  const live = liveParts(load, first);
  const toggle = h('input', { type: 'checkbox', id: 'topics-show-system', checked: showSystemTopics,
    onchange: (e) => {
      showSystemTopics = e.target.checked;
      for (const tr of document.querySelectorAll('#topics-table tr.system')) tr.hidden = !showSystemTopics;
    } });
  return [
    h('header', { class: 'page-head' }, h('h1', {}, 'Topics'),
      live(({ topics }) => {
        const systemCount = topics.filter((t) => t.system).length;
        return h('p', { class: 'muted', id: 'topics-counts' }, `${topics.length - systemCount} topics, ${systemCount} system topics`);
      })),
    createTopicForm(),
    section(null, 'topics',
      h('div', { class: 'table-tools' }, h('label', { class: 'check' }, toggle, ' Show system topics')),
      live(({ topics }) => topicsTable(topics))),
  ];
}

function topicsTable(topics) {
  const rows = topics.slice().sort((a, b) => (a.system - b.system) || a.name.localeCompare(b.name));
  const tbody = [];
  for (const t of rows) {
    tbody.push(h('tr', { 'data-topic': t.name, class: t.system ? 'system' : null, hidden: t.system && !showSystemTopics },
      h('td', {}, h('a', { href: topicHref(t.name), class: 'topic-link' }, t.name),
        t.system ? badge('system', 'muted') : null),
      num(t.read_queues, { 'data-col': 'read_queues' }),
      num(t.write_queues, { 'data-col': 'write_queues' }),
      h('td', { 'data-col': 'message_type' }, t.message_type || '–'),
      h('td', { 'data-col': 'perm' }, h('code', {}, t.perm)),
      num(t.messages, { 'data-col': 'messages' }),
      num(t.max_offset, { 'data-col': 'max_offset' }),
      h('td', { class: 'actions' }, t.system ? null : h('button', {
        class: 'danger small delete-topic', type: 'button', 'data-testid': 'delete-topic',
        'data-topic': t.name, onclick: () => deleteTopic(t.name),
      }, 'Delete'))));
  }
  return h('div', { class: 'scroll-x' }, table('topics-table', ['Topic', ['Read queues', true], ['Write queues', true], 'Message type', 'Perm',
    ['Messages', true], ['Max offset', true], ''], tbody, 'No topics.'));
}

function createTopicForm() {
  const name = h('input', { id: 'topic-create-name', name: 'name', required: true, placeholder: 'OrderEvents',
    pattern: '[%a-zA-Z0-9_\\-]+', maxlength: 127, autocomplete: 'off' });
  const queues = h('input', { id: 'topic-create-queues', name: 'queues', type: 'number', min: 1, max: 1024, value: 4, required: true });
  const type = h('select', { id: 'topic-create-type', name: 'message_type' },
    h('option', { value: '' }, 'unspecified'), MESSAGE_TYPES.map((t) => h('option', { value: t }, t)));
  const form = h('form', { id: 'topic-create-form', class: 'inline-form', autocomplete: 'off' },
    field('Name', name), field('Queues', queues), field('Message type', type),
    h('button', { type: 'submit', id: 'topic-create-submit', class: 'primary' }, 'Create topic'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submitting(form, async () => {
      const created = await api('POST', '/topics', {
        name: name.value.trim(), queues: Number(queues.value), message_type: type.value || null,
      });
      await reload();
      showNotice(`Topic ${created && created.name ? created.name : name.value.trim()} created.`);
    });
  });
  return section('Create topic', 'topic-create', form);
}

async function deleteTopic(name) {
  if (!confirm(`Delete topic ${name} and all its messages? This cannot be undone.`)) return;
  clearMessages();
  try {
    await api('DELETE', '/topics/' + enc(name));
    if (parseHash().parts.length > 1) location.hash = '#/topics';
    else await reload();
    showNotice(`Topic ${name} deleted.`);
  } catch (err) {
    showError(describe(err));
  }
}

// Renders the current route again without touching the history.
function reload() { return route(); }

async function topicView(name) {
  const load = () => api('GET', '/topics/' + enc(name));
  const first = await load();
  document.title = `${first.name} · skiff console`;
  const live = liveParts(load, first);
  return [
    h('header', { class: 'page-head' },
      h('p', { class: 'crumbs' }, h('a', { href: '#/topics' }, 'Topics'), ' / '),
      h('h1', { id: 'topic-name', 'data-testid': 'topic-name' }, first.name),
      live((t) => {
        const total = t.queues.reduce((acc, q) => acc + (q.max_offset - q.min_offset), 0);
        return h('p', { class: 'meta' }, badge(t.perm), badge(t.message_type || 'type unspecified', 'muted'),
          ` ${t.read_queues} read / ${t.write_queues} write queues · `,
          h('span', { id: 'topic-messages', 'data-value': total }, `${fmtInt(total)} messages`), ' · ',
          h('a', { id: 'topic-browse-link', 'data-testid': 'topic-browse-link', href: '#/messages?topic=' + enc(t.name) }, 'Browse messages'));
      })),
    live((t) => topicFigures(t)),
    h('div', { class: 'cols send-tail' }, sendForm(first.name), tailPanel(first.name)),
  ];
}

function topicFigures(t) {
  return h('div', { class: 'cols' },
      section('Queues', 'topic-queues-panel',
        table('topic-queues', [['Queue', true], ['Min offset', true], ['Max offset', true], ['Messages', true]],
          t.queues.map((q) => h('tr', { 'data-queue': q.queue_id },
            num(q.queue_id, { 'data-col': 'queue_id' }),
            num(q.min_offset, { 'data-col': 'min_offset' }),
            num(q.max_offset, { 'data-col': 'max_offset' }),
            h('td', { class: 'num' }, h('a', {
              href: `#/messages?topic=${enc(t.name)}&queue=${q.queue_id}&from=${Math.max(q.min_offset, q.max_offset - 20)}&count=20`,
            }, fmtInt(q.max_offset - q.min_offset))))), 'No queues.')),
      section('Consumer groups', 'topic-groups-panel',
        table('topic-groups', ['Group', ['Lag', true]],
          t.groups.map((g) => h('tr', { 'data-group': g.group },
            h('td', {}, h('a', { href: groupHref(g.group) }, g.group)),
            num(g.lag, { 'data-col': 'lag' }))), 'No group consumes this topic.')));
}

// "k=v" per line; blank lines and lines starting with # are skipped.
function parseProperties(text) {
  const out = {};
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) throw new Error(`properties, line ${i + 1}: expected key=value`);
    out[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
  }
  return out;
}

const DELAY_LEVELS = ['1s', '5s', '10s', '30s', '1m', '2m', '3m', '4m', '5m', '6m', '7m', '8m', '9m', '10m',
  '20m', '30m', '1h', '2h'];

function sendForm(topic) {
  const body = h('textarea', { id: 'send-body', name: 'body', rows: 4, placeholder: '{"hello": "world"}' });
  const tag = h('input', { id: 'send-tag', name: 'tag', placeholder: 'TagA', autocomplete: 'off' });
  const keys = h('input', { id: 'send-keys', name: 'keys', placeholder: 'key1 key2', autocomplete: 'off' });
  const props = h('textarea', { id: 'send-properties', name: 'properties', rows: 2, placeholder: 'region=eu\nsource=console' });
  const delay = h('select', { id: 'send-delay', name: 'delay_level' },
    h('option', { value: 0 }, 'none'), DELAY_LEVELS.map((d, i) => h('option', { value: i + 1 }, `${i + 1}: ${d}`)));
  const result = h('div', { id: 'send-result', 'data-testid': 'send-result', class: 'result', hidden: true });
  const form = h('form', { id: 'send-form', class: 'stack-form', autocomplete: 'off' },
    field('Body', body),
    h('div', { class: 'row' }, field('Tag', tag), field('Keys', keys, 'space-separated')),
    field('Properties', props, 'one key=value per line'),
    h('div', { class: 'row' }, field('Delay level', delay),
      h('button', { type: 'submit', id: 'send-submit', class: 'primary' }, 'Send')),
    result);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submitting(form, async () => {
      let properties;
      try { properties = parseProperties(props.value); } catch (err) { throw new ApiError(400, err.message); }
      const sent = await api('POST', `/topics/${enc(topic)}/messages`, {
        body: body.value, tag: tag.value.trim() || null, keys: keys.value.trim() || null,
        properties, delay_level: Number(delay.value),
      });
      result.replaceChildren('Sent: ',
        h('a', { id: 'send-msg-id', 'data-testid': 'send-msg-id', href: messageHref(sent.msg_id) }, sent.msg_id),
        ` to queue ${sent.queue_id} at offset ${sent.queue_offset}.`);
      result.hidden = false;
    });
  });
  return section('Send test message', 'send', form);
}

function tailPanel(topic) {
  const status = h('span', { id: 'tail-status', 'data-testid': 'tail-status', 'data-state': 'closed', class: 'tail-status' }, 'stopped');
  const list = h('tbody', {});
  const empty = h('p', { class: 'muted small', id: 'tail-empty' }, 'Messages sent to this topic from now on appear here.');
  const button = h('button', { type: 'button', id: 'tail-toggle', class: 'small' }, 'Pause');
  let source = null;
  let count = 0;

  const setState = (state, text) => { status.dataset.state = state; status.textContent = text; };
  const stop = () => {
    if (source) source.close();
    source = null;
    setState('closed', 'paused');
    button.textContent = 'Resume';
  };
  const start = () => {
    setState('connecting', 'connecting…');
    button.textContent = 'Pause';
    source = new EventSource(`${API}/topics/${enc(topic)}/tail`);
    source.onopen = () => setState('open', 'live');
    // A dropped stream reconnects by itself and starts again at the topic's end.
    source.onerror = () => { if (source) setState('connecting', 'reconnecting…'); };
    source.addEventListener('message', (ev) => {
      let m;
      try { m = JSON.parse(ev.data); } catch (e) { return; }
      empty.hidden = true;
      count++;
      list.prepend(h('tr', { 'data-msg-id': m.msg_id, 'data-uniq-key': m.uniq_key },
        h('td', { class: 'nowrap' }, fmtTimeOfDay(m.store_ms || m.born_ms)),
        num(m.queue_id), num(m.queue_offset),
        h('td', { class: 'wrap' }, h('a', { href: messageHref(m.msg_id), class: 'mono' }, m.msg_id)),
        h('td', {}, m.tags || ''), h('td', { class: 'wrap' }, m.keys || ''),
        num(m.body_size)));
      while (list.children.length > TAIL_KEEP) list.lastChild.remove();
      counter.textContent = `${count} received`;
    });
  };
  const counter = h('span', { class: 'muted small', id: 'tail-count' }, '');
  button.addEventListener('click', () => (source ? stop() : start()));
  start();
  onLeave(() => { if (source) source.close(); source = null; });

  return section(null, 'tail',
    h('div', { class: 'panel-head' }, h('h2', {}, 'Live tail'), status, counter, button),
    empty,
    h('div', { class: 'scroll' }, h('table', { id: 'tail-list', 'data-testid': 'tail-list', class: 'compact' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Stored'), h('th', { class: 'num' }, 'Queue'),
        h('th', { class: 'num' }, 'Offset'), h('th', {}, 'Message ID'), h('th', {}, 'Tags'),
        h('th', {}, 'Keys'), h('th', { class: 'num' }, 'Bytes'))),
      list)));
}

// ---- groups ------------------------------------------------------------------------------------------

async function groupsView() {
  document.title = 'Groups · skiff console';
  const live = liveParts(() => api('GET', '/groups'), await api('GET', '/groups'));
  return [
    h('header', { class: 'page-head' }, h('h1', {}, 'Consumer groups'),
      live(({ groups }) => h('p', { class: 'muted', id: 'groups-count' }, `${groups.length} groups`))),
    createGroupForm(),
    section(null, 'groups', live(renderGroups)),
  ];
}

// A group's settings, as the broker keeps them (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's).
function groupSettingsFields(prefix, config) {
  const c = config || {};
  const retry = h('input', { id: prefix + '-retry-max', name: 'retry_max_times', type: 'number', min: 0, max: 100000, value: c.retry_max_times ?? 16, required: true });
  const retryQueues = h('input', { id: prefix + '-retry-queues', name: 'retry_queue_nums', type: 'number', min: 0, max: 1024, value: c.retry_queue_nums ?? 1, required: true });
  const check = (id, label, on) => {
    const box = h('input', { type: 'checkbox', id: prefix + '-' + id, checked: on });
    return [box, h('label', { class: 'check' }, box, ' ' + label)];
  };
  const [orderly, orderlyLabel] = check('orderly', 'orderly', c.consume_orderly ?? false);
  const [broadcast, broadcastLabel] = check('broadcast', 'broadcasting allowed', c.consume_broadcast_enable ?? true);
  const [fromMin, fromMinLabel] = check('from-min', 'consume from min', c.consume_from_min_enable ?? true);
  return {
    fields: [field('Retry max times', retry, 'then the dead-letter topic'), field('Retry queues', retryQueues),
      h('div', { class: 'checks' }, orderlyLabel, broadcastLabel, fromMinLabel)],
    values: () => ({
      retry_max_times: Number(retry.value), retry_queue_nums: Number(retryQueues.value),
      consume_orderly: orderly.checked, consume_broadcast_enable: broadcast.checked, consume_from_min_enable: fromMin.checked,
    }),
  };
}

function createGroupForm() {
  const name = h('input', { id: 'group-create-name', name: 'name', required: true, placeholder: 'OrderConsumers',
    pattern: '[%\\|a-zA-Z0-9_\\-]+', maxlength: 255, autocomplete: 'off' });
  const settings = groupSettingsFields('group-create', null);
  const form = h('form', { id: 'group-create-form', class: 'inline-form', autocomplete: 'off' },
    field('Name', name), settings.fields,
    h('button', { type: 'submit', id: 'group-create-submit', class: 'primary' }, 'Create group'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submitting(form, async () => {
      const created = await api('POST', '/groups', Object.assign({ name: name.value.trim() }, settings.values()));
      await reload();
      showNotice(`Group ${created.name} created.`);
    });
  });
  return section('Create group', 'group-create', form);
}

// Change the group's settings, or delete it (after a confirmation).
function groupSettingsPanel(g) {
  if (!g.config) {
    return section('Settings', 'group-settings', h('p', { class: 'muted', id: 'group-settings-none' },
      'This group has no configuration on the broker (it has offsets only): create it on the groups page to set its retries.'));
  }
  const settings = groupSettingsFields('group-edit', g.config);
  const form = h('form', { id: 'group-edit-form', class: 'inline-form', autocomplete: 'off' }, settings.fields,
    h('button', { type: 'submit', id: 'group-edit-submit', class: 'primary' }, 'Save'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submitting(form, async () => {
      await api('PUT', '/groups/' + enc(g.name), settings.values());
      showNotice(`Group ${g.name} saved.`);
    });
  });
  const clean = h('input', { type: 'checkbox', id: 'group-delete-offsets' });
  const remove = h('button', { type: 'button', id: 'group-delete', class: 'danger' }, 'Delete group');
  remove.addEventListener('click', () => {
    const members = (g.members || []).length;
    if (!confirm(`Delete group ${g.name}${clean.checked ? ' and its consumer offsets' : ''}?` +
      (members ? ` ${members} consumers are connected to it now.` : ''))) return;
    submitting(remove.parentElement, async () => {
      await api('DELETE', '/groups/' + enc(g.name) + (clean.checked ? '?clean_offsets=true' : ''));
      location.hash = '#/groups';
      showNotice(`Group ${g.name} deleted.`);
    });
  });
  return section('Settings', 'group-settings', form,
    h('div', { class: 'inline-form delete-row' }, h('label', { class: 'check' }, clean, ' also forget its consumer offsets'), remove));
}

function renderGroups({ groups }) {
  const rows = groups.slice().sort((a, b) => a.name.localeCompare(b.name)).map((g) =>
    h('tr', { 'data-group': g.name },
      h('td', {}, h('a', { href: groupHref(g.name) }, g.name)),
      num(g.members, { 'data-col': 'members' }),
      num(g.lag, { 'data-col': 'lag', class: 'num' + (g.lag > 0 ? ' warn' : '') }),
      h('td', { 'data-col': 'consume_orderly' }, g.consume_orderly ? 'orderly' : 'concurrent'),
      num(g.retry_max_times, { 'data-col': 'retry_max_times' })));
  return h('div', { class: 'scroll-x' }, table('groups-table',
    ['Group', ['Members', true], ['Lag', true], 'Consumption', ['Retry max times', true]], rows, 'No groups.'));
}

async function groupView(name) {
  const load = async () => {
    const [g, topicList] = await Promise.all([
      api('GET', '/groups/' + enc(name)),
      api('GET', '/topics').catch(() => ({ topics: [] })),
    ]);
    return { g, known: new Set(topicList.topics.map((t) => t.name)) };
  };
  const first = await load();
  const { g, known } = first;
  document.title = `${g.name} · skiff console`;
  const live = liveParts(load, first);
  const dlqLink = (id, label, t) => (t ? h('a', { id, 'data-testid': id, href: topicHref(t),
    class: known.has(t) ? null : 'absent', title: known.has(t) ? null : 'not created yet' }, label + ' ' + t) : null);

  return [
    h('header', { class: 'page-head' },
      h('p', { class: 'crumbs' }, h('a', { href: '#/groups' }, 'Groups'), ' / '),
      h('h1', { id: 'group-name', 'data-testid': 'group-name' }, g.name),
      live(({ g: v }) => h('p', { class: 'meta' }, v.message_model ? badge(v.message_model) : null,
        v.consume_type ? badge(v.consume_type, 'muted') : null, ' ',
        dlqLink('group-retry-link', 'retry', v.retry_topic), ' · ', dlqLink('group-dlq-link', 'DLQ', v.dlq_topic)))),
    live(groupFigures),
    resetForm(g),
    deadLetters(g, known.has(g.dlq_topic)),
    groupSettingsPanel(g),
  ];
}

// "topic: 0, 1, 2" per topic, each on its line.
function queueList(queues) {
  const byTopic = new Map();
  for (const q of queues) byTopic.set(q.topic, [...(byTopic.get(q.topic) || []), q.queue_id]);
  if (!byTopic.size) return '–';
  return [...byTopic].map(([t, ids]) => h('div', {}, h('span', { class: 'muted' }, t + ': '), ids.join(', ')));
}

// What the group page shows of the group's state: all of it refreshes.
function groupFigures({ g, known }) {
  const history = g.lag_history || [];
  const topicCell = (t) => (known.has(t) ? h('a', { href: topicHref(t) }, t) : t);
  return [
    h('div', { class: 'stats' },
      h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, 'Lag'),
        h('div', { class: 'stat-value', id: 'group-lag', 'data-testid': 'group-lag', 'data-value': g.lag }, fmtInt(g.lag))),
      h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, 'Members'),
        h('div', { class: 'stat-value', id: 'group-member-count', 'data-value': g.members.length }, fmtInt(g.members.length))),
      h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, 'In flight'),
        h('div', { class: 'stat-value', id: 'group-in-flight' }, fmtInt(g.queues.reduce((a, q) => a + (q.in_flight || 0), 0))))),
    h('div', { class: 'cols chart-cols' },
      h('div', { class: 'chart-box wide' },
        h('div', { class: 'chart-head' }, h('h3', {}, 'Lag over time'),
          h('span', { class: 'chart-now' }, history.length ? `${fmtInt(history[history.length - 1].lag)} now` : '')),
        lineChart('group-lag-chart', [{ name: 'lag', color: '#d97706', points: history.map((p) => [p.at_ms, p.lag]) }],
          { title: 'Lag over time', integer: true }),
        h('p', { class: 'muted small', id: 'lag-history-note', 'data-since-ms': g.history_since_ms ?? '' },
          `Sampled since the broker started (${fmtTime(g.history_since_ms)}): the history is kept in memory, so a restart begins it again.`)),
      section('Subscriptions', 'group-subscriptions-panel',
        table('group-subscriptions', ['Topic', 'Expression'], g.subscriptions.map((sub) =>
          h('tr', { 'data-topic': sub.topic }, h('td', {}, topicCell(sub.topic)), h('td', {}, h('code', {}, sub.expression)))),
        'No subscriptions (none connected).'))),
    section('Members', 'group-members-panel',
      h('p', { class: 'muted small' }, g.message_model === 'BROADCASTING'
        ? 'A broadcasting group: every member reads every queue.'
        : 'Consumers choose their queues themselves; shown is what the clients\' default strategy (AllocateMessageQueueAveragely) gives each member.'),
      table('group-members', ['Client', 'Address', 'Language', 'Version', 'Protocol', 'Queues (by the default allocation)'],
        (g.member_details || []).map((m) => h('tr', { 'data-client': m.client_id },
          h('td', { class: 'mono wrap', 'data-col': 'client_id' }, m.client_id),
          h('td', { class: 'mono', 'data-col': 'address' }, m.address || '–'),
          h('td', { 'data-col': 'language' }, m.language || '–'),
          h('td', { 'data-col': 'version' }, m.version || '–'),
          h('td', { 'data-col': 'protocol' }, m.protocol || '–'),
          h('td', { 'data-col': 'queues', 'data-value': (m.queues || []).map((x) => x.topic + ':' + x.queue_id).join(' ') },
            queueList(m.queues || [])))), 'No consumer is connected.')),
    section('Queues', 'group-queues-panel',
      table('group-queues', ['Topic', ['Queue', true], ['Broker offset', true], ['Consumer offset', true],
        ['Lag', true], ['In flight', true], 'Last commit'],
      g.queues.map((q) => h('tr', { 'data-topic': q.topic, 'data-queue': q.queue_id },
        h('td', {}, topicCell(q.topic)),
        num(q.queue_id, { 'data-col': 'queue_id' }),
        num(q.broker_offset, { 'data-col': 'broker_offset' }),
        num(q.consumer_offset, { 'data-col': 'consumer_offset' }),
        num(q.lag, { 'data-col': 'lag', class: 'num' + (q.lag > 0 ? ' warn' : '') }),
        num(q.in_flight, { 'data-col': 'in_flight' }),
        h('td', {}, timeNode(q.last_commit_ms)))), 'No offsets committed.')),
  ];
}

// The group's dead letters: browse them, or send every one back to the topic it came from.
function deadLetters(g, exists) {
  const result = h('div', { id: 'dlq-result', 'data-testid': 'dlq-result', class: 'result', hidden: true });
  const button = h('button', { type: 'button', id: 'dlq-resend-all', class: 'danger', disabled: !exists },
    'Resend all dead letters');
  button.addEventListener('click', () => {
    if (!confirm(`Send every dead letter of ${g.name} back to the topic it came from? ` +
      'Its consumers will receive each of them again. Letters resent before are skipped.')) return;
    const form = button.parentElement;
    submitting(form, async () => {
      const r = await api('POST', `/groups/${enc(g.name)}/dlq/resend`, { confirm: true });
      const resent = r.resent || [];
      const skipped = r.skipped || [];
      result.replaceChildren(h('p', { id: 'dlq-resent-count', 'data-value': resent.length, 'data-skipped': skipped.length },
        `${fmtInt(resent.length)} dead letters resent` +
        (skipped.length ? `; ${fmtInt(skipped.length)} skipped, resent before (resend those from their own pages).` : '.')),
      table('dlq-resent', ['From', 'To topic', 'New message'], resent.map((x) => h('tr', { 'data-from': x.from },
        h('td', { class: 'mono' }, h('a', { href: messageHref(x.from) }, x.from)),
        h('td', {}, h('a', { href: topicHref(x.topic) }, x.topic)),
        h('td', { class: 'mono' }, h('a', { href: messageHref(x.msg_id) }, x.msg_id))))));
      result.hidden = false;
      showNotice(`${resent.length} dead letters resent.`);
    });
  });
  const browse = exists
    ? h('a', { id: 'dlq-browse', href: `#/messages?topic=${enc(g.dlq_topic)}&queue=0&from=0&count=20` }, 'Browse them')
    : h('span', { class: 'muted' }, 'This group has no dead letters.');
  return section('Dead letters', 'dlq', h('div', { class: 'inline-form' }, browse, ' ', button), result);
}

function resetForm(g) {
  // The topics the group subscribes to come first, its retry topic (which clients subscribe to
  // by themselves) last: the first is what a reset is usually for, and is preselected.
  const retry = (t) => t.startsWith('%RETRY%') || t.startsWith('%DLQ%');
  const byRank = (list) => list.slice().sort((a, b) => (retry(a) - retry(b)) || a.localeCompare(b));
  const topics = [...new Set([...byRank(g.subscriptions.map((x) => x.topic)), ...byRank(g.queues.map((q) => q.topic))])];
  topics.sort((a, b) => retry(a) - retry(b));
  const topic = h('select', { id: 'reset-topic', name: 'topic', required: true },
    topics.map((t, i) => h('option', { value: t, selected: i === 0 }, t)));
  const to = h('select', { id: 'reset-to', name: 'to' },
    h('option', { value: 'earliest' }, 'earliest (first stored message)'),
    h('option', { value: 'latest' }, 'latest (skip everything stored)'),
    h('option', { value: 'time' }, 'a date and time'));
  const when = h('input', { id: 'reset-time', name: 'time', type: 'datetime-local', step: 1, disabled: true });
  to.addEventListener('change', () => { when.disabled = to.value !== 'time'; });
  const result = h('div', { id: 'reset-result', 'data-testid': 'reset-result', class: 'result', hidden: true });
  const form = h('form', { id: 'reset-form', class: 'inline-form', autocomplete: 'off' },
    field('Topic', topic), field('Reset to', to), field(`Date and time (${zoneOf(new Date())})`, when),
    h('button', { type: 'submit', id: 'reset-submit', class: 'danger', disabled: !topics.length }, 'Reset offset'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    let target = to.value;
    let label = target;
    if (target === 'time') {
      const ms = new Date(when.value).getTime();
      if (!when.value || Number.isNaN(ms)) { showError('Error: choose a date and time to reset to.'); return; }
      target = ms;
      label = fmtTime(ms);
    }
    if (!confirm(`Reset group ${g.name} on topic ${topic.value} to ${label}? ` +
      'Its consumers will re-read or skip messages from there.')) return;
    submitting(form, async () => {
      const r = await api('POST', `/groups/${enc(g.name)}/reset-offset`, { topic: topic.value, to: target, confirm: true });
      result.replaceChildren(
        h('p', {}, `Offsets of ${g.name} on ${topic.value} reset to ${label}:`),
        table('reset-offsets', [['Queue', true], ['New offset', true]],
          (r.queues || []).map((q) => h('tr', { 'data-queue': q.queue_id }, num(q.queue_id), num(q.offset, { 'data-col': 'offset' })))));
      result.hidden = false;
      showNotice(`Offsets reset on ${(r.queues || []).length} queues.`);
    });
  });
  return section('Reset offset', 'reset', form, result);
}

// ---- messages --------------------------------------------------------------------------------------------

function summaryRow(m) {
  return h('tr', { 'data-msg-id': m.msg_id, 'data-uniq-key': m.uniq_key, 'data-queue': m.queue_id, 'data-offset': m.queue_offset },
    num(m.queue_id, { 'data-col': 'queue_id' }),
    num(m.queue_offset, { 'data-col': 'queue_offset' }),
    h('td', {}, h('a', { href: messageHref(m.msg_id), class: 'mono msg-link' }, m.msg_id)),
    h('td', { 'data-col': 'tags' }, m.tags || ''),
    h('td', { 'data-col': 'keys' }, m.keys || ''),
    h('td', { class: 'col-born' }, timeNode(m.born_ms)),
    h('td', {}, timeNode(m.store_ms)),
    num(m.body_size, { 'data-col': 'body_size' }));
}

async function messagesView(params) {
  document.title = 'Messages · skiff console';
  const { topics } = await api('GET', '/topics');
  const p = (k) => params.get(k);
  const topicNames = topics.slice().sort((a, b) => (a.system - b.system) || a.name.localeCompare(b.name)).map((t) => t.name);
  const selected = p('topic') || '';
  const topicSelect = (id) => h('select', { id, name: 'topic', required: true },
    h('option', { value: '' }, 'choose a topic'),
    selected && !topicNames.includes(selected) ? h('option', { value: selected }, selected) : null,
    topicNames.map((t) => h('option', { value: t, selected: t === selected }, t)));

  const bTopic = topicSelect('browse-topic');
  const bQueue = h('input', { id: 'browse-queue', name: 'queue', type: 'number', min: 0, value: p('key') ? '' : (p('queue') ?? 0) });
  const bFrom = h('input', { id: 'browse-from', name: 'from', type: 'number', min: 0, value: p('from') ?? 0 });
  const bCount = h('input', { id: 'browse-count', name: 'count', type: 'number', min: 1, max: MAX_BROWSE, value: p('count') ?? 20,
    title: `at most ${MAX_BROWSE}, as many as the API lists` });
  const browse = h('form', { id: 'browse-form', class: 'inline-form', autocomplete: 'off' },
    field('Topic', bTopic), field('Queue', bQueue), field('From offset', bFrom), field('Count', bCount, `at most ${MAX_BROWSE}`),
    h('button', { type: 'submit', id: 'browse-submit', class: 'primary' }, 'Browse'));
  browse.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams({ topic: bTopic.value, queue: bQueue.value || '0', from: bFrom.value || '0', count: bCount.value || '20' });
    navigate('#/messages?' + q);
  });

  const kTopic = topicSelect('lookup-key-topic');
  const kKey = h('input', { id: 'lookup-key', name: 'key', required: true, value: p('key') || '', placeholder: 'order-42', autocomplete: 'off' });
  const byKey = h('form', { id: 'lookup-key-form', class: 'inline-form', autocomplete: 'off' },
    field('Topic', kTopic), field('Key', kKey),
    h('button', { type: 'submit', id: 'lookup-key-submit' }, 'Find by key'));
  byKey.addEventListener('submit', (e) => {
    e.preventDefault();
    navigate('#/messages?' + new URLSearchParams({ topic: kTopic.value, key: kKey.value.trim() }));
  });

  const idInput = h('input', { id: 'lookup-id', name: 'id', required: true, placeholder: 'message id', class: 'mono', autocomplete: 'off' });
  const byId = h('form', { id: 'lookup-id-form', class: 'inline-form', autocomplete: 'off' },
    field('Message ID', idInput, "the producer's id (SendResult.getMsgId(), what consumers print) or the offset id; every topic is searched"),
    h('button', { type: 'submit', id: 'lookup-id-submit' }, 'Open'));
  byId.addEventListener('submit', (e) => {
    e.preventDefault();
    navigate(messageHref(idInput.value.trim()));
  });

  // A time range over every queue of a topic, in the browser's zone.
  const toLocalInput = (ms) => {
    if (ms === null || ms === '' || Number.isNaN(Number(ms))) return '';
    const d = new Date(Number(ms));
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  };
  const tTopic = topicSelect('time-topic');
  const tBegin = h('input', { id: 'time-begin', name: 'begin', type: 'datetime-local', step: 1, required: true, value: toLocalInput(p('begin_ms')) });
  const tEnd = h('input', { id: 'time-end', name: 'end', type: 'datetime-local', step: 1, required: true, value: toLocalInput(p('end_ms')) });
  const byTime = h('form', { id: 'time-form', class: 'inline-form', autocomplete: 'off' },
    field('Topic', tTopic), field(`From (${zoneOf(new Date())})`, tBegin), field('To', tEnd),
    h('button', { type: 'submit', id: 'time-submit' }, 'Find by time'));
  byTime.addEventListener('submit', (e) => {
    e.preventDefault();
    const begin = new Date(tBegin.value).getTime();
    const end = new Date(tEnd.value).getTime();
    if (Number.isNaN(begin) || Number.isNaN(end)) { showError('Error: choose both times.'); return; }
    navigate('#/messages?' + new URLSearchParams({ topic: tTopic.value, begin_ms: begin, end_ms: end + 999 }));
  });

  const head = h('header', { class: 'page-head' }, h('h1', {}, 'Messages'));
  const forms = [section('Browse a queue', 'browse', browse), section('Find by time, across queues', 'time-panel', byTime),
    h('div', { class: 'cols lookups' }, section('Find by key', 'lookup-key-panel', byKey), section('Find by ID', 'lookup-id-panel', byId))];

  if (!selected) {
    return [head, forms, h('p', { class: 'muted', id: 'messages-hint' }, 'Choose a topic and a queue to list its messages.')];
  }

  // The query goes to the broker as written, so a malformed URL gets the broker's own answer.
  const query = new URLSearchParams();
  query.set('topic', selected);
  let title;
  if (p('key') !== null) {
    query.set('key', p('key'));
    title = `Messages of ${selected} with key ${p('key')}`;
  } else if (p('begin_ms') !== null || p('end_ms') !== null) {
    for (const k of ['begin_ms', 'end_ms', 'count']) if (p(k) !== null) query.set(k, p(k));
    title = `Messages of ${selected} stored from ${fmtTime(Number(p('begin_ms')))} to ${fmtTime(Number(p('end_ms')))}`;
  } else {
    for (const k of ['queue', 'from', 'count']) if (p(k) !== null) query.set(k, p(k));
    title = `${selected}, queue ${p('queue') ?? 0}, from offset ${p('from') ?? 0}`;
  }
  let page;
  try {
    page = await api('GET', '/messages?' + query);
  } catch (err) {
    // The forms stay, so a bad query can be corrected in place.
    showError(describe(err));
    return [head, forms, h('p', { class: 'muted', id: 'messages-failed' }, 'No messages listed.')];
  }
  const msgs = page.messages || [];
  let next = null;
  // A next page when the broker has more: past its max offset, when it says, else a full page.
  const more = typeof page.max_offset === 'number' ? page.next < page.max_offset
    : msgs.length >= Number(p('count') || 20);
  if (p('key') === null && p('begin_ms') === null && page.next !== null && page.next !== undefined && msgs.length && more) {
    const q = new URLSearchParams(query);
    q.set('from', page.next);
    if (!q.has('count')) q.set('count', 20);
    next = h('a', { id: 'messages-next', 'data-testid': 'messages-next', href: '#/messages?' + q, class: 'button' }, 'Next page →');
  }
  return [head, forms,
    section(title, 'messages',
      table('messages-table', [['Queue', true], ['Offset', true], 'Message ID', 'Tags', 'Keys', ['Born', false, 'col-born'], 'Stored', ['Bytes', true]],
        msgs.map(summaryRow), 'No messages in this range.'),
      h('div', { class: 'table-foot' }, h('span', { class: 'muted small', id: 'messages-count', 'data-more': page.more ? 'true' : null },
        `${msgs.length} messages` + (page.more ? ` (the first ${msgs.length}; narrow the range to see the rest)` : '')), next)),
  ];
}

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function decodeBase64(b64) {
  const bin = atob(b64 || '');
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

// Offset, 16 bytes in hex, then the printable ASCII, as `xxd` shows them.
function hexDump(bytes, limit) {
  const lines = [];
  const n = Math.min(bytes.length, limit);
  for (let off = 0; off < n; off += 16) {
    const row = bytes.subarray(off, Math.min(off + 16, n));
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0'));
    const groups = [];
    for (let i = 0; i < 16; i += 2) groups.push((hex[i] || '  ') + (hex[i + 1] || '  '));
    const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}: ${groups.join(' ')}  ${ascii}`);
  }
  if (bytes.length > n) lines.push(`… ${bytes.length - n} more bytes`);
  return lines.join('\n');
}

async function messageView(id) {
  const m = await api('GET', '/messages/' + enc(id));
  document.title = `Message ${m.msg_id} · skiff console`;
  const bytes = decodeBase64(m.body_base64);
  let pretty = null;
  if (m.body_text !== null && m.body_text !== undefined) {
    try {
      const parsed = JSON.parse(m.body_text);
      if (parsed !== null && typeof parsed === 'object') pretty = JSON.stringify(parsed, null, 2);
    } catch (e) { /* not JSON: shown as text only */ }
  }
  const row = (label, value, key) => h('tr', { 'data-key': key }, h('th', {}, label), h('td', {}, value));
  const props = Object.entries(m.properties || {}).sort((a, b) => a[0].localeCompare(b[0]));
  const around = `#/messages?topic=${enc(m.topic)}&queue=${m.queue_id}&from=${Math.max(0, m.queue_offset - 10)}&count=20`;

  return [
    h('header', { class: 'page-head' },
      h('p', { class: 'crumbs' }, h('a', { href: '#/messages?topic=' + enc(m.topic) }, 'Messages'), ' / '),
      h('h1', { class: 'mono', id: 'message-id', 'data-testid': 'message-id' }, m.msg_id),
      h('p', { class: 'meta' }, h('a', { href: around, id: 'message-around' }, 'Messages around this one'), ' · ',
        h('a', { href: '#/traces/' + enc(m.uniq_key || m.msg_id), id: 'message-trace-link' }, 'Trace'))),
    h('div', { class: 'cols' },
      section('Message', 'message-summary-panel', h('table', { id: 'message-summary', class: 'kv' }, h('tbody', {},
        row('Topic', h('a', { href: topicHref(m.topic) }, m.topic), 'topic'),
        m.uniq_key ? row('Unique key', h('span', { class: 'mono' }, m.uniq_key), 'uniq_key') : null,
        row('Queue', String(m.queue_id), 'queue_id'),
        row('Queue offset', String(m.queue_offset), 'queue_offset'),
        row('Tags', m.tags || '–', 'tags'),
        row('Keys', m.keys || '–', 'keys'),
        row('Born', fmtTime(m.born_ms, true), 'born'),
        row('Stored', fmtTime(m.store_ms, true), 'stored'),
        row('Body size', fmtBytes(m.body_size), 'body_size')))),
      section('Properties', 'message-properties-panel', table('message-properties', ['Property', 'Value'],
        props.map(([k, v]) => h('tr', { 'data-key': k }, h('td', { class: 'mono' }, k), h('td', { class: 'mono wrap' }, v))),
        'No properties.'))),
    section('Body', 'message-body-panel',
      m.body_text === null || m.body_text === undefined
        ? h('p', { class: 'muted', id: 'message-body-binary' }, 'The body is not UTF-8 text; see the hex dump.')
        : null,
      pretty !== null ? h('div', {}, h('h3', {}, 'JSON'), h('pre', { id: 'message-body-json', 'data-testid': 'message-body-json' }, pretty)) : null,
      m.body_text !== null && m.body_text !== undefined
        ? h('div', {}, h('h3', {}, 'Text'), h('pre', { id: 'message-body-text', 'data-testid': 'message-body-text' }, m.body_text))
        : null,
      h('details', { open: bytes.length <= 512 ? true : null }, h('summary', {}, `Hex (${fmtInt(bytes.length)} bytes)`),
        h('pre', { id: 'message-body-hex', 'data-testid': 'message-body-hex', class: 'hex' }, hexDump(bytes, 64 * 1024)))),
    m.copies && m.copies.length
      ? section('Copies with this id', 'message-copies-panel',
        h('p', { class: 'muted small' }, 'A retried, dead-lettered or resent message keeps its producer\'s id; this page shows the one stored first.'),
        table('message-copies', ['Topic', 'Message ID'], m.copies.map((c) => h('tr', { 'data-msg-id': c.msg_id },
          h('td', {}, h('a', { href: topicHref(c.topic) }, c.topic)),
          h('td', { class: 'mono wrap' }, h('a', { href: messageHref(c.msg_id) }, c.msg_id))))))
      : null,
    m.topic.startsWith('%DLQ%') ? resendPanel(m) : null,
    m.consumed_by && m.consumed_by.length
      ? section('Consume status', 'message-consumed-panel', table('message-consumed-by', ['Group', 'Status'],
        m.consumed_by.map((c) => h('tr', { 'data-group': c.group },
          h('td', {}, h('a', { href: groupHref(c.group) }, c.group)),
          h('td', { 'data-col': 'consumed', 'data-value': String(c.consumed) }, c.consumed ? badge('consumed', 'ok') : badge('not consumed yet', 'warn'))))))
      : null,
  ];
}

// A dead letter's way back: sent again to the topic it first went to (its RETRY_TOPIC). One that
// was resent says so, and asks before sending it once more.
function resendPanel(m) {
  const origin = (m.properties || {}).RETRY_TOPIC;
  const resent = m.resent || [];
  const result = h('p', { id: 'resend-result', 'data-testid': 'resend-result', hidden: true });
  const button = h('button', { type: 'button', id: 'resend-message', class: 'danger', disabled: !origin },
    !origin ? 'No topic to resend to' : resent.length ? `Resend to ${origin} again` : `Resend to ${origin}`);
  const marker = resent.length
    ? h('p', { id: 'resent-marker', 'data-count': resent.length }, badge('resent', 'warn'),
      `Resent ${resent.length === 1 ? 'once' : resent.length + ' times'}, last on ${fmtTime(resent[resent.length - 1].store_ms)} as `,
      h('a', { class: 'mono', href: messageHref(resent[resent.length - 1].msg_id) }, resent[resent.length - 1].msg_id), '.')
    : null;
  button.addEventListener('click', () => {
    const question = resent.length
      ? `This dead letter was already resent (${resent.length === 1 ? 'once' : resent.length + ' times'}). Send it to ${origin} once more? Its group will receive it again.`
      : `Send this dead letter back to ${origin}? Its group will receive it again.`;
    if (!confirm(question)) return;
    submitting(button.parentElement, async () => {
      const r = await api('POST', `/messages/${enc(m.msg_id)}/resend`, { again: resent.length > 0 });
      result.replaceChildren('Resent to ', h('a', { href: topicHref(r.topic) }, r.topic), ' as ',
        h('a', { id: 'resent-id', class: 'mono', href: messageHref(r.msg_id), 'data-value': r.msg_id }, r.msg_id), '.');
      result.hidden = false;
      showNotice('Dead letter resent.');
    });
  });
  return section('Dead letter', 'message-resend-panel', marker, h('div', { class: 'inline-form' }, button), result);
}

// A message's trace as its clients recorded it (enableMsgTrace): each step on a time line.
const TRACE_COLORS = { Pub: '#2563eb', SubBefore: '#d97706', SubAfter: '#059669', EndTransaction: '#7c3aed', Recall: '#dc2626' };

async function traceView(id, params) {
  const topic = params.get('trace_topic');
  const t = await api('GET', `/messages/${enc(id)}/traces` + (topic ? '?trace_topic=' + enc(topic) : ''));
  document.title = `Trace ${id} · skiff console`;
  const events = t.events || [];
  // A SubAfter is stamped when consumption ended: its bar ends there.
  const begins = (e) => (e.at_ms === null || e.at_ms === undefined ? null
    : e.kind === 'SubAfter' ? e.at_ms - (e.cost_ms || 0) : e.at_ms);
  const times = events.map(begins).filter((x) => x !== null);
  const start = times.length ? Math.min(...times) : 0;
  const end = times.length ? Math.max(...events.map((e) => (begins(e) ?? start) + (e.cost_ms || 0))) : 1;
  const span = Math.max(1, end - start);
  // Bars; the step's name before them and its timing after. A viewBox this narrow keeps the
  // labels legible in a 1024 px window.
  const width = 440;
  const rowH = 28;
  const svg = s('svg', { id: 'trace-timeline', 'data-testid': 'trace-timeline', class: 'chart', viewBox: `0 0 ${width + 430} ${events.length * rowH + 20}`,
    role: 'img', 'aria-label': 'Trace timeline' },
  events.map((e, i) => {
    const from = (begins(e) ?? start) - start;
    const x = 200 + from / span * width;
    const w = Math.max(4, (e.cost_ms || 0) / span * width);
    const y = 10 + i * rowH;
    return s('g', {},
      s('text', { x: 0, y: y + 14, class: 'trace-label', text: `${e.kind} ${e.group || ''}` }),
      s('rect', { x, y, width: w, height: rowH - 10, rx: 3, fill: TRACE_COLORS[e.kind] || '#6b7280' }),
      s('text', { x: x + w + 6, y: y + 14, class: 'trace-label', text: `+${from} ms` + (e.cost_ms ? `, took ${e.cost_ms} ms` : '') }));
  }));
  return [
    h('header', { class: 'page-head' },
      h('p', { class: 'crumbs' }, h('a', { href: '#/messages' }, 'Messages'), ' / '),
      h('h1', {}, 'Trace ', h('span', { class: 'mono', id: 'trace-id' }, id)),
      h('p', { class: 'meta' }, `from ${t.trace_topic}`)),
    events.length
      ? section('Timeline', 'trace-panel', svg)
      : section('Timeline', 'trace-panel', h('p', { class: 'muted', id: 'trace-empty' },
        'No trace recorded for this message (its clients trace only with enableMsgTrace on).')),
    section('Events', 'trace-events-panel', table('trace-events', ['Step', 'Group', 'Topic', 'At', ['Cost (ms)', true], 'Result', 'Client'],
      events.map((e) => h('tr', { 'data-kind': e.kind },
        h('td', {}, badge(e.kind)),
        h('td', {}, e.group ? h('a', { href: groupHref(e.group) }, e.group) : '–'),
        h('td', {}, e.topic ? h('a', { href: topicHref(e.topic) }, e.topic) : '–'),
        h('td', {}, e.at_ms ? timeNode(e.at_ms, true) : '–'),
        num(e.cost_ms),
        h('td', { 'data-col': 'success' }, e.success === null || e.success === undefined ? '–' : (e.success ? badge('ok', 'ok') : badge('failed', 'warn'))),
        h('td', { class: 'mono' }, e.client_host || e.store_host || '–'))), 'No events.')),
  ];
}

// ---- start --------------------------------------------------------------------------------------------

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  route();
  // The nav's broker name, on every page (the overview also refreshes it).
  api('GET', '/overview').then(setBrokerFoot).catch(() => {});
});
