// The events of each type, signed here with the library's own `sign` and
// unwrapped: no server needed (`node --test build/test/webhook-events.test.js`).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type AccountBalanceLowEvent,
  type AnyWebhookEvent,
  type UnknownWebhookEvent,
  Vidgate,
  WebhookVerificationError,
  webhooks,
} from "../src/index.js";

const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
// The body the server sends for account.balance_low (webhook_senders.rs),
// byte for byte: serde_json's compact form with sorted keys, the threshold a
// whole number of dollars written as 5.0, the balance negative while in debt.
const BALANCE_LOW_BODY =
  '{"data":{"account_id":"acct_7Hx2","balance_usd":-1.25,"object":"balance_alert","threshold_usd":5.0},' +
  '"timestamp":"2026-11-28T10:02:11.318Z","type":"account.balance_low"}';

async function signedHeaders(body: string, messageId = "msg_low_1"): Promise<Record<string, string>> {
  const now = Math.floor(Date.now() / 1000);
  return {
    "webhook-id": messageId,
    "webhook-timestamp": String(now),
    "webhook-signature": await webhooks.sign(body, SECRET, messageId, now),
  };
}

/** What a receiver does with each kind; the compiler checks that `type` narrows each one. */
function describe(event: AnyWebhookEvent): string {
  switch (event.type) {
    case "generation.succeeded":
    case "generation.failed":
    case "generation.canceled":
      return `${event.type} ${event.data.id} ${event.data.status}`;
    case "account.balance_low":
      return `low ${event.data.account_id} ${event.data.balance_usd} < ${event.data.threshold_usd}`;
    default: {
      const known: never = event;
      return `unknown ${(known as UnknownWebhookEvent).type}`;
    }
  }
}

test("account.balance_low unwraps to its own event", async () => {
  const headers = await signedHeaders(BALANCE_LOW_BODY);
  await webhooks.verify(BALANCE_LOW_BODY, headers, SECRET);
  const event = await webhooks.unwrap(new TextEncoder().encode(BALANCE_LOW_BODY), headers, SECRET);
  assert.equal(event.type, "account.balance_low");
  const expected: AccountBalanceLowEvent = {
    type: "account.balance_low",
    timestamp: "2026-11-28T10:02:11.318Z",
    data: { object: "balance_alert", account_id: "acct_7Hx2", balance_usd: -1.25, threshold_usd: 5 },
  };
  assert.deepEqual(event, expected);
  assert.equal(describe(event), "low acct_7Hx2 -1.25 < 5");
  // The client's unwrap, with the secret from its options, is the same.
  const client = new Vidgate({ apiKey: "unused", webhookSecret: SECRET });
  assert.deepEqual(await client.webhooks.unwrap(BALANCE_LOW_BODY, new Headers(headers)), expected);
});

test("an altered or malformed account.balance_low is refused", async () => {
  const headers = await signedHeaders(BALANCE_LOW_BODY);
  await assert.rejects(webhooks.unwrap(BALANCE_LOW_BODY.replace("-1.25", "100.0"), headers, SECRET), /No signature/);
  const malformed: unknown[] = [
    { object: "balance_alert", account_id: "acct_1", threshold_usd: 5 },
    { object: "balance_alert", account_id: "acct_1", balance_usd: "4.2", threshold_usd: 5 },
    { object: "balance_alert", balance_usd: 4.2, threshold_usd: 5 },
    "acct_1",
    null,
  ];
  for (const data of malformed) {
    const body = JSON.stringify({ type: "account.balance_low", timestamp: "2026-11-28T10:02:11.318Z", data });
    await assert.rejects(webhooks.unwrap(body, await signedHeaders(body), SECRET), (error: unknown) => {
      assert.ok(error instanceof WebhookVerificationError);
      assert.match(error.message, /not a vidgate event/);
      return true;
    });
  }
});

test("each kind is told apart by type; an unknown type comes back as its JSON, not refused", async () => {
  const generation = JSON.stringify({ type: "generation.failed", timestamp: "2026-11-23T12:00:00.000Z", data: { id: "gen_1", status: "failed" } });
  const later = JSON.stringify({ type: "account.something_new", timestamp: "2026-12-01T00:00:00Z", data: { object: "something", id: "x_1" } });
  const described: string[] = [];
  for (const body of [generation, BALANCE_LOW_BODY, later]) {
    described.push(describe(await webhooks.unwrap(body, await signedHeaders(body), SECRET)));
  }
  assert.deepEqual(described, ["generation.failed gen_1 failed", "low acct_7Hx2 -1.25 < 5", "unknown account.something_new"]);
  const unknown = (await webhooks.unwrap(later, await signedHeaders(later), SECRET)) as unknown as UnknownWebhookEvent;
  assert.deepEqual(unknown, { type: "account.something_new", timestamp: "2026-12-01T00:00:00Z", data: { object: "something", id: "x_1" } });
  // Still not an event: no type, a type that is not a string, not an object.
  for (const body of ['{"timestamp": "2026-12-01T00:00:00Z", "data": {}}', '{"type": 7, "data": {}}', "[1, 2]", "null"]) {
    await assert.rejects(webhooks.unwrap(body, await signedHeaders(body), SECRET), /not a vidgate event/);
  }
});
