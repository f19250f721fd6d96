#!/usr/bin/env node
// gRPC smoke with the official RocketMQ 5 Node.js client (npm rocketmq-client-nodejs 1.0.8).
//
//   NODE_PATH=DIR/node_modules node smoke.js --endpoint HOST:PORT --topic T --group G [--tls on|off] [--count 10]
//
// Same scenario as ../python/smoke.py: the topic (NORMAL, 4 queues) and the group exist already;
// a SimpleConsumer (tag filter) starts, then a Producer; COUNT messages (tag, two keys, a user
// property) are sent, received with receive + ack (10 s invisible duration) and checked (message
// id, topic, body, tag, keys, property, delivery attempt); then it keeps receiving until 13 s after
// the last message came in and expects nothing. Prints PASS/FAIL; exit 0 iff it passed.
//
// Endpoints: the client sends QueryRoute to `endpoints` and everything else (Telemetry, Heartbeat,
// SendMessage, ReceiveMessage, AckMessage) to the endpoints in the route's message queues.
//
// TLS: `sslEnabled: true` makes the client use grpc-js ChannelCredentials.createSsl() with the
// default roots (certificate and host name verified), and it takes no other TLS option. Test
// brokers serve a self-signed certificate (the Apache proxy's: CN=localhost, no SAN) while routes
// name 127.0.0.1, so with --tls on this script fetches the server's certificate from the endpoint
// and makes createSsl() trust exactly that certificate, checking it against its own CN (or first
// DNS SAN) instead of the address dialled. The handshake and the certificate check still happen.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const tls = require('node:tls');
const util = require('node:util');
const grpc = require('@grpc/grpc-js');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const INVISIBLE_MS = 10000;
const QUIET_AFTER_MS = INVISIBLE_MS + 3000;
const TAG = 'smoke-tag';

function log(msg) {
  process.stderr.write(`[node ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

// The client's default logger is one egg-logger shared by all clients, which the first
// shutdown() closes (the next client's shutdown then throws on logging): one plain file logger.
function fileLogger(name) {
  const dir = path.join(os.homedir(), 'logs', 'rocketmq');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'rocketmq_client_nodejs.log');
  const line = level => (...args) =>
    fs.appendFileSync(file, `${new Date().toISOString()} ${level} ${name} ${util.format(...args)}\n`);
  return { info: line('INFO'), warn: line('WARN'), error: line('ERROR'), debug: line('DEBUG') };
}

function parseArgs() {
  const a = { tls: 'off', count: 10 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    a[k] = k === 'count' ? parseInt(argv[i + 1], 10) : argv[i + 1];
  }
  for (const k of [ 'endpoint', 'topic', 'group' ]) {
    if (!a[k]) throw new Error(`--${k} is required`);
  }
  return a;
}

function fetchCertificate(endpoint) {
  const [ host, port ] = endpoint.split(':');
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host, port: Number(port), rejectUnauthorized: false, ALPNProtocols: [ 'h2' ] }, () => {
      const cert = s.getPeerCertificate();
      s.destroy();
      const b64 = cert.raw.toString('base64').match(/.{1,64}/g).join('\n');
      resolve({ cert, pem: `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n` });
    });
    s.on('error', reject);
  });
}

async function trustServerCertificate(endpoint) {
  const { cert, pem } = await fetchCertificate(endpoint);
  const sans = (cert.subjectaltname || '').split(', ').filter(x => x.startsWith('DNS:')).map(x => x.slice(4));
  const name = sans[0] || (cert.subject && cert.subject.CN);
  if (!name) throw new Error(`the certificate of ${endpoint} names no host`);
  const orig = grpc.ChannelCredentials.createSsl;
  grpc.ChannelCredentials.createSsl = () => orig.call(grpc.ChannelCredentials, Buffer.from(pem), null, null, {
    checkServerIdentity: (_host, c) => tls.checkServerIdentity(name, c),
  });
  log(`TLS: trusting the server's certificate CN=${cert.subject && cert.subject.CN} as ${JSON.stringify(name)}`);
}

async function main() {
  const a = parseArgs();
  const sslEnabled = a.tls === 'on';
  const run = String(Date.now());
  const problems = [];
  if (sslEnabled) await trustServerCertificate(a.endpoint);

  const common = { endpoints: a.endpoint, sslEnabled, requestTimeout: 10000, namespace: '' };
  const consumer = new SimpleConsumer({
    ...common,
    logger: fileLogger('consumer'),
    consumerGroup: a.group,
    subscriptions: new Map().set(a.topic, TAG),
    awaitDuration: 5000,
  });
  const producer = new Producer({ ...common, logger: fileLogger('producer'), topics: [ a.topic ] });
  const started = [];
  try {
    await consumer.startup();
    started.push(consumer);
    log(`consumer started (${a.endpoint}, tls ${a.tls})`);
    await producer.startup();
    started.push(producer);
    log('producer started');

    const sent = new Map(); // message id -> { i, body }
    for (let i = 0; i < a.count; i++) {
      const body = Buffer.from(`node smoke ${run} #${i}`);
      const r = await producer.send({
        topic: a.topic,
        tag: TAG,
        keys: [ `nodekey-${run}-${i}`, `nodekey-${run}` ],
        properties: new Map([[ 'smoke-index', String(i) ]]),
        body,
      });
      if (!r.messageId) problems.push(`send #${i}: empty message id`);
      if (sent.has(r.messageId)) problems.push(`send #${i}: message id ${r.messageId} repeated`);
      sent.set(r.messageId, { i, body });
    }
    log(`sent ${sent.size}`);

    const got = new Map();
    const deadline = Date.now() + 60000;
    let lastMsgAt = Date.now();
    while (got.size < sent.size && Date.now() < deadline) {
      const msgs = await consumer.receive(32, INVISIBLE_MS);
      for (const m of msgs) {
        lastMsgAt = Date.now();
        const id = m.messageId;
        if (got.has(id)) problems.push(`${id}: received twice before the ack window`);
        const s = sent.get(id);
        if (!s) {
          problems.push(`unexpected message ${id} body ${m.body}`);
        } else {
          const keys = [ ...m.keys ].sort().join(',');
          const wantKeys = [ `nodekey-${run}-${s.i}`, `nodekey-${run}` ].sort().join(',');
          const checks = [
            [ 'topic', m.topic, a.topic ],
            [ 'body', m.body.toString(), s.body.toString() ],
            [ 'tag', m.tag, TAG ],
            [ 'keys', keys, wantKeys ],
            [ 'property smoke-index', m.properties.get('smoke-index'), String(s.i) ],
            [ 'delivery attempt', m.deliveryAttempt, 1 ],
          ];
          for (const [ what, have, want ] of checks) {
            if (have !== want) problems.push(`#${s.i} ${id}: ${what} ${JSON.stringify(have)}, want ${JSON.stringify(want)}`);
          }
        }
        got.set(id, m);
        await consumer.ack(m);
      }
    }
    log(`received and acked ${got.size}`);
    const missing = [ ...sent ].filter(([ id ]) => !got.has(id)).map(([ , s ]) => s.i);
    if (missing.length) problems.push(`not received within 60 s: #${missing.join(',')}`);

    while (Date.now() < lastMsgAt + QUIET_AFTER_MS) {
      for (const m of await consumer.receive(32, INVISIBLE_MS)) {
        problems.push(`after ack: ${m.messageId} came again (attempt ${m.deliveryAttempt}, body ${m.body})`);
        await consumer.ack(m);
      }
    }
    log('quiet window over');
  } catch (e) {
    problems.push(`${e && e.name}: ${e && e.message}`);
  } finally {
    for (const c of started) {
      try {
        await c.shutdown();
      } catch (e) {
        log(`shutdown: ${e && e.message}`);
      }
    }
  }

  const name = `node.${sslEnabled ? 'tls' : 'plain'}`;
  if (problems.length) {
    for (const p of problems) console.log(`  ${p}`);
    console.log(`FAIL ${name}: ${problems.length} problem(s), first: ${problems[0]}`);
    return 1;
  }
  console.log(`PASS ${name}: ${a.count} sent, received with tag/keys/property, acked, none back in ${QUIET_AFTER_MS / 1000} s`);
  return 0;
}

main().then(rc => process.exit(rc), e => {
  console.log(`FAIL node: ${e && e.stack}`);
  process.exit(1);
});
