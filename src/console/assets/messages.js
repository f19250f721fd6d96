// skiff console: the message pages: browse, look up, one message, dead-letter resend, traces. Loaded after app.js (whose helpers it uses) and before the first
// route is drawn; values from the broker go into the DOM as text only.
'use strict';

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
