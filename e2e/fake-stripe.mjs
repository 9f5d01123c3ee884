// A fake of the part of Stripe the dashboard's "Add credit" reaches, for the
// browser tests: Checkout Sessions created (`POST /v1/checkout/sessions`,
// form-encoded) and read back (`GET /v1/checkout/sessions/{id}`), the hosted
// payment page a customer is sent to (`GET /pay/{id}`), and, when the page's
// "Pay" button is pressed (`POST /pay/{id}`), the signed
// `checkout.session.completed` event Stripe would send to the account's
// webhook endpoint, before the browser is sent back to the session's
// success URL.
//
// It is the Node twin of the Rust tests' fake (crates/vidgate-server/tests/
// it/fake_stripe.rs) and proves only what that fake's sources prove:
// - The session object is Stripe's own example (crates/vidgate-server/tests/
//   fixtures/stripe/checkout_session.json, from `openapi/fixtures3.json` of
//   the public `stripe/openapi` repository) with the fields the request set
//   replaced.
// - The form fields read, Bearer authentication with the secret key, the
//   error object, and Idempotency-Key replays: Stripe's API reference
//   ("Create a Checkout Session", "Authentication", "Errors", "Idempotent
//   requests").
// - A paid session is `complete` and `paid` with a payment intent, as the
//   Rust fake's `pay` makes it.
// - The `Stripe-Signature` header: `t={unix seconds},v1={hex HMAC-SHA256 of
//   "{t}.{body}" keyed by the whole whsec_ secret}`, as Stripe's libraries
//   sign (`WebhookSignature.generate_signature_header` of the official
//   `stripe` Python package, 16.1.0), the same as `stripe_signature` of the
//   Rust fake, which tests/stripe_client.py checks against that package.
// - The event envelope (`id`, `object: "event"`, `type`, `created`,
//   `data.object`): Stripe's API reference ("The Event object").
// A guess, named as one: that Stripe sends the event before the browser is
// redirected. Real Stripe gives no such order; here it makes the test's
// wait for the credit a wait for the page rather than for a retry.
//
// The webhook endpoint is the origin of the session's success URL with
// `/webhooks/stripe`, which is where the operator points Stripe's endpoint
// (docs/stripe.md). Usage: FAKE_STRIPE_SECRET_KEY=sk_… FAKE_STRIPE_WEBHOOK_SECRET=whsec_…
// node e2e/fake-stripe.mjs; it prints `fake Stripe at http://127.0.0.1:PORT`.
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const secretKey = process.env.FAKE_STRIPE_SECRET_KEY;
const webhookSecret = process.env.FAKE_STRIPE_WEBHOOK_SECRET;
if (!secretKey || !webhookSecret) {
  console.error('set FAKE_STRIPE_SECRET_KEY and FAKE_STRIPE_WEBHOOK_SECRET');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const example = JSON.parse(
  fs.readFileSync(path.join(here, '../crates/vidgate-server/tests/fixtures/stripe/checkout_session.json'), 'utf8'),
);

const sessions = new Map();
// Idempotency-Key → the form it was first sent with and the session it made.
const idempotency = new Map();
let base = '';

function stripeError(response, status, type, message, code) {
  const error = { type, message };
  if (code) error.code = code;
  json(response, status, { error });
}

function json(response, status, body) {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}

function authenticated(request, response) {
  if (request.headers.authorization === `Bearer ${secretKey}`) return true;
  stripeError(response, 401, 'invalid_request_error', 'Invalid API Key provided.');
  return false;
}

async function body(request) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

function createSession(form, response) {
  const mode = form.get('mode');
  if (!mode) return stripeError(response, 400, 'invalid_request_error', 'Missing required param: mode.', 'parameter_missing');
  const unitAmount = Number.parseInt(form.get('line_items[0][price_data][unit_amount]') ?? '', 10);
  const quantity = Number.parseInt(form.get('line_items[0][quantity]') ?? '', 10);
  const currency = form.get('line_items[0][price_data][currency]');
  if (!Number.isInteger(unitAmount) || !Number.isInteger(quantity) || !currency
      || !form.get('line_items[0][price_data][product_data][name]')) {
    return stripeError(response, 400, 'invalid_request_error', '`line_items` is required in `payment` mode.', 'parameter_missing');
  }
  const metadata = {};
  for (const [key, value] of form) {
    const name = /^metadata\[(.*)\]$/.exec(key);
    if (name) metadata[name[1]] = value;
  }
  const id = `cs_test_e2e${String(sessions.size + 1).padStart(4, '0')}`;
  const now = Math.floor(Date.now() / 1000);
  const session = {
    ...structuredClone(example),
    id,
    mode,
    amount_subtotal: unitAmount * quantity,
    amount_total: unitAmount * quantity,
    currency,
    client_reference_id: form.get('client_reference_id'),
    metadata,
    success_url: form.get('success_url'),
    cancel_url: form.get('cancel_url'),
    payment_status: 'unpaid',
    status: 'open',
    payment_intent: null,
    created: now,
    expires_at: now + 24 * 60 * 60,
    url: `${base}/pay/${id}`,
  };
  sessions.set(id, session);
  return session;
}

function signature(payload, timestamp) {
  const mac = crypto.createHmac('sha256', webhookSecret).update(`${timestamp}.${payload}`).digest('hex');
  return `t=${timestamp},v1=${mac}`;
}

// Marks the session paid and sends its completed event; the endpoint's answer.
async function pay(session) {
  session.status = 'complete';
  session.payment_status = 'paid';
  session.payment_intent = `pi_${session.id.slice(3)}`;
  const event = JSON.stringify({
    id: `evt_${session.id.slice(3)}`,
    object: 'event',
    api_version: '2025-01-27.acacia',
    created: Math.floor(Date.now() / 1000),
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type: 'checkout.session.completed',
    data: { object: session },
  });
  const endpoint = new URL('/webhooks/stripe', session.success_url);
  const answer = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'stripe-signature': signature(event, Math.floor(Date.now() / 1000)) },
    body: event,
  });
  return { status: answer.status, text: await answer.text() };
}

function escape(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}

const server = http.createServer(async (request, response) => {
  try {
    const url = new URL(request.url, base);
    const sessionPath = /^\/v1\/checkout\/sessions\/([^/]+)$/.exec(url.pathname);
    const payPath = /^\/pay\/([^/]+)$/.exec(url.pathname);
    if (request.method === 'POST' && url.pathname === '/v1/checkout/sessions') {
      if (!authenticated(request, response)) return;
      const text = await body(request);
      const key = request.headers['idempotency-key'];
      const earlier = key && idempotency.get(key);
      if (earlier) {
        if (earlier.form !== text) {
          return stripeError(response, 400, 'idempotency_error',
            'Keys for idempotent requests can only be used with the same parameters they were first used with.');
        }
        return json(response, 200, sessions.get(earlier.id));
      }
      const session = createSession(new URLSearchParams(text), response);
      if (!session) return;
      if (key) idempotency.set(key, { form: text, id: session.id });
      return json(response, 200, session);
    }
    if (request.method === 'GET' && sessionPath) {
      if (!authenticated(request, response)) return;
      const session = sessions.get(sessionPath[1]);
      if (!session) {
        return stripeError(response, 404, 'invalid_request_error', `No such checkout.session: '${sessionPath[1]}'`, 'resource_missing');
      }
      return json(response, 200, session);
    }
    const session = payPath && sessions.get(payPath[1]);
    if (request.method === 'GET' && session) {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      return response.end(`<!doctype html><title>Fake Stripe Checkout</title>
<h1 id="fake-checkout">Pay ${escape(session.amount_total)} cents for ${escape(session.id)}</h1>
<form method="post" action="/pay/${escape(session.id)}"><button id="fake-pay" type="submit">Pay</button></form>`);
    }
    if (request.method === 'POST' && session) {
      const sent = await pay(session);
      if (sent.status !== 200) {
        response.writeHead(502, { 'content-type': 'text/plain' });
        return response.end(`the webhook endpoint answered ${sent.status}: ${sent.text}`);
      }
      response.writeHead(303, { location: session.success_url });
      return response.end();
    }
    response.writeHead(404, { 'content-type': 'text/plain' });
    response.end('not found');
  } catch (error) {
    response.writeHead(500, { 'content-type': 'text/plain' });
    response.end(String(error));
  }
});

server.listen(0, '127.0.0.1', () => {
  base = `http://127.0.0.1:${server.address().port}`;
  console.log(`fake Stripe at ${base}`);
});
