// skiff console: one page over /api/v1, routed by the URL's hash. No dependencies and no build
// step, because the broker embeds its files as they are. This one holds what every page shares
// (DOM and formatting helpers, the API call, charts, routing, refreshes); the pages are in
// topics.js (with the overview), groups.js, messages.js and pages.js (producers, cluster),
// which load after it and before the first route is drawn.
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
  { match: (p) => p.length === 0, nav: 'overview', view: () => overviewView() },
  { match: (p) => p.length === 1 && p[0] === 'topics', nav: 'topics', view: () => topicsView() },
  { match: (p) => p.length === 2 && p[0] === 'topics', nav: 'topics', view: (r) => topicView(r.parts[1]) },
  { match: (p) => p.length === 1 && p[0] === 'groups', nav: 'groups', view: () => groupsView() },
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

// ---- start --------------------------------------------------------------------------------------------

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  route();
  // The nav's broker name, on every page (the overview also refreshes it).
  api('GET', '/overview').then(setBrokerFoot).catch(() => {});
});
