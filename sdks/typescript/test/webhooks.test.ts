// A webhook from the real server, received locally and verified; and the
// Standard Webhooks test vector.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Vidgate, WebhookVerificationError, webhooks } from "../src/index.js";
import { ENDPOINT, SMALL, joinSharedWorld, type World } from "./harness.js";

const SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SPEC_TIMESTAMP = 1614265330;
const SPEC_PAYLOAD = '{"test": 2432232314}';
const SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

let world: World;
joinSharedWorld((started) => (world = started));

test("the signature matches the Standard Webhooks vector", async () => {
  assert.equal(await webhooks.sign(SPEC_PAYLOAD, SPEC_SECRET, SPEC_ID, SPEC_TIMESTAMP), SPEC_SIGNATURE);
  const headers = new Headers({ "webhook-id": SPEC_ID, "webhook-timestamp": String(SPEC_TIMESTAMP), "webhook-signature": `v1,bm90IG91cnM= ${SPEC_SIGNATURE}` });
  await webhooks.verify(SPEC_PAYLOAD, headers, SPEC_SECRET, { now: SPEC_TIMESTAMP + 10 });
  await webhooks.verify(new TextEncoder().encode(SPEC_PAYLOAD), headers, SPEC_SECRET, { now: SPEC_TIMESTAMP });
});

test("stale, forged, altered or incomplete messages are refused", async () => {
  const good = { "Webhook-Id": SPEC_ID, "Webhook-Timestamp": String(SPEC_TIMESTAMP), "Webhook-Signature": SPEC_SIGNATURE };
  const cases: [Record<string, string>, string, RegExp][] = [
    [{ ...good, "Webhook-Timestamp": String(SPEC_TIMESTAMP - 301) }, SPEC_PAYLOAD, /too far/],
    [{ ...good, "Webhook-Signature": "v1,bm90IG91cnM=" }, SPEC_PAYLOAD, /No signature/],
    [{ ...good, "Webhook-Id": "msg_other" }, SPEC_PAYLOAD, /No signature/],
    [{ ...good, "Webhook-Signature": `v2,${SPEC_SIGNATURE.slice(3)}` }, SPEC_PAYLOAD, /No signature/],
    [good, SPEC_PAYLOAD.replace("2", "3"), /No signature/],
    [{ "Webhook-Id": SPEC_ID, "Webhook-Timestamp": String(SPEC_TIMESTAMP) }, SPEC_PAYLOAD, /webhook-signature/],
  ];
  for (const [headers, payload, message] of cases) {
    await assert.rejects(webhooks.verify(payload, headers, SPEC_SECRET, { now: SPEC_TIMESTAMP }), (error: unknown) => {
      assert.ok(error instanceof WebhookVerificationError);
      assert.match(error.message, message);
      return true;
    });
  }
});

test("a delivered webhook verifies and unwraps; a resend verifies too", async () => {
  const account = world.account();
  const client = world.client(account);
  const generation = await client.run(ENDPOINT, { prompt: "a kite with a webhook", ...SMALL }, { webhookUrl: world.receiver.url });
  const delivered = await world.receiver.next();
  await client.webhooks.verify(delivered.body, delivered.headers, account.webhook_secret);
  const event = await client.webhooks.unwrap(delivered.body, delivered.headers, account.webhook_secret);
  assert.equal(event.type, "generation.succeeded");
  assert.equal(event.data.id, generation.id);
  assert.equal(event.data.output?.video_url, generation.output?.video_url);

  const tampered = JSON.parse(delivered.body) as { data: { output: { video_url: string } } };
  tampered.data.output.video_url = "https://evil.example/clip.mp4";
  await assert.rejects(client.webhooks.verify(JSON.stringify(tampered), delivered.headers, account.webhook_secret), WebhookVerificationError);
  await assert.rejects(client.webhooks.verify(delivered.body, delivered.headers, `whsec_${"QUJD".repeat(8)}`), WebhookVerificationError);
  await assert.rejects(
    webhooks.verify(delivered.body, delivered.headers, account.webhook_secret, { now: Date.now() / 1000 + 600 }),
    /too far/,
  );

  const [delivery, ...others] = await client.webhooks.deliveries(generation.id);
  assert.equal(others.length, 0);
  assert.equal(delivery!.id, delivered.headers["webhook-id"]);
  assert.equal(delivery!.url, world.receiver.url);
  assert.equal((await client.webhooks.retryDelivery(generation.id, delivery!.id)).id, delivery!.id);
  const resent = await world.receiver.next();
  assert.equal(resent.headers["webhook-id"], delivery!.id);
  await client.webhooks.verify(resent.body, resent.headers, account.webhook_secret);
});

test("a rotated secret signs alongside the old one", async () => {
  const account = world.account();
  const client = world.client(account);
  const rotated = await client.webhooks.rotateSecret();
  assert.match(rotated.webhook_secret, /^whsec_/);
  assert.notEqual(rotated.previous_secret_expires_at, null);
  await client.run(ENDPOINT, { prompt: "after rotation", ...SMALL }, { webhookUrl: world.receiver.url });
  const delivered = await world.receiver.next();
  await client.webhooks.verify(delivered.body, delivered.headers, rotated.webhook_secret);
  await client.webhooks.verify(delivered.body, delivered.headers, account.webhook_secret);
});

test("the client's secret comes from its options", async () => {
  const body = JSON.stringify({ type: "generation.canceled", timestamp: "2026-11-23T12:00:00.000Z", data: { id: "gen_1", status: "canceled" } });
  const now = Math.floor(Date.now() / 1000);
  const headers = { "webhook-id": "msg_1", "webhook-timestamp": String(now), "webhook-signature": await webhooks.sign(body, SPEC_SECRET, "msg_1", now) };
  const client = new Vidgate({ apiKey: "unused", webhookSecret: SPEC_SECRET });
  const event = await client.webhooks.unwrap(body, headers);
  assert.equal(event.type, "generation.canceled");
  assert.equal(event.data.status, "canceled");
});
