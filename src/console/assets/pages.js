// skiff console: the producer and cluster pages, added to app.js's routes (this file loads after
// it, before the first route is drawn). Values from the broker go into the DOM as text only.
'use strict';

// ---- producers ---------------------------------------------------------------------------------------

async function producersView() {
  document.title = 'Producers · skiff console';
  const load = () => api('GET', '/producers');
  const live = liveParts(load, await load());
  return [
    h('header', { class: 'page-head' }, h('h1', {}, 'Producers'),
      live(({ producers }) => {
        const groups = new Set(producers.map((p) => p.group)).size;
        const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;
        return h('p', { class: 'muted', id: 'producers-count' }, `${plural(producers.length, 'producer')} in ${plural(groups, 'group')}`);
      })),
    section(null, 'producers', live(({ producers }) => h('div', { class: 'scroll-x' },
      table('producers-table', ['Group', 'Client', 'Address', 'Language', 'Version', 'Protocol'],
        producers.map((p) => h('tr', { 'data-group': p.group, 'data-client': p.client_id },
          h('td', { 'data-col': 'group' }, p.group),
          h('td', { class: 'mono wrap', 'data-col': 'client_id' }, p.client_id),
          h('td', { class: 'mono', 'data-col': 'address' }, p.address),
          h('td', { 'data-col': 'language' }, p.language),
          h('td', { 'data-col': 'version' }, p.version),
          h('td', { 'data-col': 'protocol' }, p.protocol))),
        'No producer is registered (a remoting producer registers with its heartbeat; gRPC producers name no group).')))),
  ];
}

// ---- cluster ---------------------------------------------------------------------------------------------

// A setting's value as text: unset is a dash, a list its items, a nested table "key=value"
// pairs.
function settingText(v) {
  if (v === null || v === undefined) return '–';
  if (Array.isArray(v)) return v.length ? v.map(settingText).join(', ') : 'none';
  if (typeof v === 'object') return Object.entries(v).map(([k, x]) => `${k}=${settingText(x)}`).join(', ') || 'none';
  return String(v);
}

async function clusterView() {
  document.title = 'Cluster · skiff console';
  const load = () => api('GET', '/cluster');
  const first = await load();
  const live = liveParts(load, first);
  const kv = (label, value, key) => h('tr', { 'data-key': key }, h('th', {}, label), h('td', {}, value));
  const settings = Object.entries(first.settings || {}).sort((a, b) => a[0].localeCompare(b[0]));
  return [
    h('header', { class: 'page-head' }, h('h1', {}, 'Cluster'),
      h('p', { class: 'muted' }, `${first.cluster_name}: one broker, ${first.broker_name}`)),
    h('div', { class: 'cols' },
      section('Broker', 'cluster-broker', live((c) => h('table', { id: 'cluster-summary', class: 'kv' }, h('tbody', {},
        kv('Cluster', c.cluster_name, 'cluster_name'),
        kv('Broker', c.broker_name, 'broker_name'),
        kv('Version', 'skiff ' + c.version, 'version'),
        kv('Remoting address', h('span', { class: 'mono' }, c.listen), 'listen'),
        kv('Started', fmtTime(c.started_ms), 'started'),
        kv('Uptime', fmtDuration(c.uptime_ms), 'uptime'),
        kv('ACL', c.acl && c.acl.on ? `on, ${fmtInt(c.acl.accounts)} accounts` : 'off', 'acl'))))),
      section('Broker settings in effect', 'cluster-broker-config', table('cluster-broker-settings', ['Setting', 'Value'],
        Object.entries(first.broker || {}).map(([k, v]) => h('tr', { 'data-key': k },
          h('td', { class: 'mono' }, k), h('td', { class: 'mono wrap', 'data-col': 'value' }, settingText(v))))))),
    section('Running configuration', 'cluster-settings',
      h('p', { class: 'muted small' }, 'The node\'s settings as skiff.toml names them, after the environment and flags; secrets (the ACL\'s accounts, anything named secret, password or token) are never shown.'),
      settings.length
        ? table('cluster-settings-table', ['Key', 'Value'], settings.map(([k, v]) => h('tr', { 'data-key': k },
          h('td', { class: 'mono' }, k), h('td', { class: 'mono wrap', 'data-col': 'value' }, settingText(v)))))
        : h('p', { class: 'muted', id: 'cluster-settings-none' }, 'This node was started without settings to show.')),
  ];
}

routes.push(
  { match: (p) => p.length === 1 && p[0] === 'producers', nav: 'producers', view: producersView },
  { match: (p) => p.length === 1 && p[0] === 'cluster', nav: 'cluster', view: clusterView },
);
