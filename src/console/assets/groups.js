// skiff console: the group pages: lists, settings, lag, offset resets, dead letters. Loaded after app.js (whose helpers it uses) and before the first
// route is drawn; values from the broker go into the DOM as text only.
'use strict';

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
      // The group's setting for pop and gRPC consumers; a remoting consumer decides for itself.
      h('td', { 'data-col': 'consume_orderly' }, g.consume_orderly ? 'yes' : 'no'),
      num(g.retry_max_times, { 'data-col': 'retry_max_times' })));
  return h('div', { class: 'scroll-x' }, table('groups-table',
    ['Group', ['Members', true], ['Lag', true], 'Orderly pops (setting)', ['Retry max times', true]], rows, 'No groups.'));
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
