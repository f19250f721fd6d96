// skiff console: the users page (ACL 2.0 users and their policies), added to app.js's routes.
// Values from the broker go into the DOM as text only; a password is sent, never shown.
'use strict';

async function usersView() {
  document.title = 'Users · skiff console';
  const load = () => api('GET', '/users');
  const first = await load();
  const live = liveParts(load, first);
  return [
    h('header', { class: 'page-head' }, h('h1', {}, 'Users'),
      live((u) => h('p', { class: 'muted', id: 'users-acl' }, u.acl_on
        ? `ACL on: ${u.users.length} users; every request must be signed by one.`
        : 'ACL off: every request is served unsigned. Creating the first user (a super user) turns it on.'))),
    h('div', { class: 'cols' }, createUserForm(), setAclForm(first.users)),
    section('Users', 'users', live(renderUsers)),
    section('Policies', 'acl-entries', live(renderEntries)),
  ];
}

function createUserForm() {
  const name = h('input', { id: 'user-create-name', required: true, placeholder: 'orders-app', maxlength: 255, autocomplete: 'off' });
  const password = h('input', { id: 'user-create-password', type: 'password', required: true, autocomplete: 'new-password' });
  const superUser = h('input', { type: 'checkbox', id: 'user-create-super' });
  const form = h('form', { id: 'user-create-form', class: 'inline-form', autocomplete: 'off' },
    field('Name', name), field('Password', password, 'its secret key'),
    h('label', { class: 'check' }, superUser, ' super user'),
    h('button', { type: 'submit', id: 'user-create-submit', class: 'primary' }, 'Create user'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submitting(form, async () => {
      await api('POST', '/users', { name: name.value.trim(), password: password.value, super: superUser.checked });
      password.value = '';
      await reload();
      showNotice(`User ${name.value.trim()} created.`);
    });
  });
  return section('Create user', 'user-create', form);
}

function setAclForm(users) {
  const user = h('select', { id: 'acl-set-user', required: true },
    // A super user may do anything: a policy of its own would never be read.
    users.filter((u) => u.source === 'store' && u.type !== 'Super').map((u) => h('option', { value: u.name }, u.name)));
  const resources = h('input', { id: 'acl-set-resources', required: true, placeholder: 'Topic:orders, Group:GID_orders, Topic:audit*' });
  const actions = h('input', { id: 'acl-set-actions', required: true, value: 'Pub,Sub' });
  const decision = h('select', { id: 'acl-set-decision' }, h('option', { value: 'Allow' }, 'Allow'), h('option', { value: 'Deny' }, 'Deny'));
  const ips = h('input', { id: 'acl-set-ips', placeholder: 'any, or 10.0.0.0/8' });
  const list = (v) => v.split(',').map((x) => x.trim()).filter(Boolean);
  const form = h('form', { id: 'acl-set-form', class: 'inline-form', autocomplete: 'off' },
    field('User', user), field('Resources', resources, 'comma-separated'),
    field('Actions', actions, 'Pub, Sub, Create, Update, Delete, Get, List, All'), field('Decision', decision),
    field('Source IPs', ips),
    h('button', { type: 'submit', id: 'acl-set-submit', class: 'primary' }, 'Set'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submitting(form, async () => {
      await api('POST', `/users/${enc(user.value)}/acl`, {
        resources: list(resources.value), actions: list(actions.value), decision: decision.value, source_ips: list(ips.value),
      });
      await reload();
      showNotice(`Policy of ${user.value} set.`);
    });
  });
  return section('Allow or deny', 'acl-set', form);
}

function renderUsers({ users }) {
  const rows = users.map((u) => {
    const stored = u.source === 'store';
    const enabled = u.status === 'enable';
    const toggle = h('button', { type: 'button', class: 'small', 'data-action': 'toggle' }, enabled ? 'Disable' : 'Enable');
    toggle.addEventListener('click', () => submitting(toggle.parentElement, async () => {
      await api('PUT', '/users/' + enc(u.name), { enabled: !enabled });
      await reload();
      showNotice(`User ${u.name} ${enabled ? 'disabled' : 'enabled'}.`);
    }));
    const remove = h('button', { type: 'button', class: 'danger small', 'data-action': 'delete' }, 'Delete');
    remove.addEventListener('click', () => {
      if (!confirm(`Delete user ${u.name} and its policies? Its requests are refused from now on.`)) return;
      submitting(remove.parentElement, async () => {
        await api('DELETE', '/users/' + enc(u.name));
        await reload();
        showNotice(`User ${u.name} deleted.`);
      });
    });
    return h('tr', { 'data-user': u.name },
      h('td', { 'data-col': 'name' }, u.name),
      h('td', { 'data-col': 'type' }, u.type === 'Super' ? badge('Super') : 'Normal'),
      h('td', { 'data-col': 'status' }, enabled ? 'enabled' : badge('disabled', 'muted')),
      h('td', { 'data-col': 'source' }, stored ? 'console / mqadmin' : 'ACL file (read-only)'),
      h('td', { class: 'actions' }, stored ? [toggle, ' ', remove] : null));
  });
  return h('div', { class: 'scroll-x' }, table('users-table', ['User', 'Type', 'Status', 'Made by', ''], rows, 'No users.'));
}

function renderEntries({ entries }) {
  const rows = entries.map((e) => {
    const remove = h('button', { type: 'button', class: 'danger small', 'data-action': 'delete' }, 'Remove');
    remove.addEventListener('click', () => {
      if (!confirm(`Remove ${e.user}'s ${e.decision} of ${e.actions.join(', ')} on ${e.resource}?`)) return;
      submitting(remove.parentElement, async () => {
        await api('DELETE', `/users/${enc(e.user)}/acl?resource=${enc(e.resource)}`);
        await reload();
        showNotice(`${e.resource} removed from ${e.user}'s policy.`);
      });
    });
    return h('tr', { 'data-user': e.user, 'data-resource': e.resource },
      h('td', { 'data-col': 'user' }, e.user),
      h('td', { class: 'mono', 'data-col': 'resource' }, e.resource),
      h('td', { 'data-col': 'actions' }, e.actions.join(', ')),
      h('td', { class: 'mono', 'data-col': 'source_ips' }, e.source_ips.length ? e.source_ips.join(', ') : 'any'),
      h('td', { 'data-col': 'decision' }, e.decision === 'Deny' ? badge('Deny', 'warn') : 'Allow'),
      h('td', { 'data-col': 'policy' }, e.policy),
      h('td', { class: 'actions' }, remove));
  });
  return h('div', { class: 'scroll-x' }, table('acl-table', ['User', 'Resource', 'Actions', 'Source IPs', 'Decision', 'Policy', ''], rows,
    'No policies: a user without one is refused everything but what needs no permission.'));
}

routes.push({ match: (p) => p.length === 1 && p[0] === 'users', nav: 'users', view: usersView });
