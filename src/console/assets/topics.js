// skiff console: the overview and the topic pages. Loaded after app.js (whose helpers it uses) and before the first
// route is drawn; values from the broker go into the DOM as text only.
'use strict';

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

const MESSAGE_TYPES = ['NORMAL', 'FIFO', 'DELAY', 'TRANSACTION', 'PRIORITY', 'LITE'];
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
    first.message_type === 'LITE' ? litePanel(first.name) : null,
    h('div', { class: 'cols send-tail' }, sendForm(first.name), tailPanel(first.name)),
  ];
}

const LITE_PAGE = 50;

// A LITE parent's lite topics, a page at a time by name: the pages seen are kept so Previous
// goes back without the server remembering anything.
function litePanel(parent) {
  const body = h('div', {});
  const starts = [null];
  const summary = h('span', { class: 'muted small', id: 'lite-summary', 'data-testid': 'lite-summary' }, '');
  const prev = h('button', { type: 'button', id: 'lite-prev', class: 'small' }, 'Previous');
  const next = h('button', { type: 'button', id: 'lite-next', class: 'small' }, 'Next');
  let nextAfter = null;
  const show = async () => {
    const after = starts[starts.length - 1];
    const query = `?limit=${LITE_PAGE}` + (after ? '&after=' + enc(after) : '');
    let page;
    try {
      page = await api('GET', `/topics/${enc(parent)}/lite${query}`);
    } catch (err) {
      showError(describe(err));
      return;
    }
    nextAfter = page.next_after;
    prev.disabled = starts.length === 1;
    next.disabled = !nextAfter;
    const first = (starts.length - 1) * LITE_PAGE;
    summary.textContent = page.lite_topics.length
      ? `${fmtInt(first + 1)}–${fmtInt(first + page.lite_topics.length)} of ${fmtInt(page.total)}`
      : `${fmtInt(page.total)} lite topics`;
    summary.dataset.total = page.total;
    const headers = [['Lite topic'], ['Messages', true], ['Max offset', true], ['Last write'], ['Subscribers']]
      .concat(page.groups.map((g) => [`Lag ${g}`, true]));
    body.replaceChildren(table('lite-topics', headers,
      page.lite_topics.map((t) => h('tr', { 'data-lite': t.lite_topic },
        h('td', { class: 'wrap mono' }, t.lite_topic),
        num(t.max_offset - t.min_offset, { 'data-col': 'messages' }),
        num(t.max_offset, { 'data-col': 'max_offset' }),
        h('td', { class: 'nowrap' }, timeNode(t.last_update_ms)),
        h('td', { class: 'wrap', 'data-col': 'subscribers' },
          t.subscribers.length ? t.subscribers.map((s) => s.client_id).join(', ') : '–'),
        page.groups.map((g) => num(t.lag[g], { 'data-col': 'lag', 'data-group': g })))),
      'No lite topic yet: one is made by the first message sent to it.'));
  };
  prev.addEventListener('click', () => { if (starts.length > 1) { starts.pop(); show(); } });
  next.addEventListener('click', () => { if (nextAfter) { starts.push(nextAfter); show(); } });
  show();
  return section(null, 'lite-panel',
    h('div', { class: 'panel-head' }, h('h2', {}, 'Lite topics'), summary, h('span', { class: 'pager' }, prev, ' ', next)),
    h('div', { class: 'scroll' }, body));
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
