// SPEC.md section 7 against injected 429/500/502/503 answers.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  APIConnectionError,
  ConflictError,
  InternalServerError,
  InvalidRequestError,
  ModelUnavailableError,
  NotFoundError,
  RateLimitedError,
  UpstreamError,
  Vidgate,
  backoffDelay,
  parseRetryAfter,
} from "../src/index.js";
import { ENDPOINT, SMALL, joinSharedWorld, type World } from "./harness.js";

let world: World;
joinSharedWorld((started) => (world = started));

test("backoff doubles from one second, caps at thirty, never undercuts Retry-After", () => {
  const settings = { retryInitialDelay: 1000, retryMaxDelay: 30_000 };
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, undefined, settings, () => 0)), [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  assert.equal(backoffDelay(0, undefined, settings, () => 1), 1250);
  assert.equal(backoffDelay(0, 7000, settings, () => 0.5), 7000);
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter("Mon, 23 Nov 2026 12:00:10 GMT", Date.parse("2026-11-23T12:00:00Z")), 10_000);
  assert.equal(parseRetryAfter(null), undefined);
});

for (const status of [429, 500, 502, 503]) {
  test(`${status} is retried until success`, async () => {
    const client = world.client(world.account());
    world.proxy.inject({ method: "GET", pathPrefix: "/account", status, count: 2 });
    assert.equal((await client.account.get()).balance_usd, 100);
    assert.deepEqual(world.proxy.requestsTo("GET", "/account").map((seen) => seen.status), [status, status, 200]);
  });
}

test("retries stop after maxRetries with the typed error", async () => {
  const client = world.client(world.account(), { maxRetries: 2 });
  world.proxy.inject({ method: "GET", pathPrefix: "/account", status: 503, count: 10 });
  await assert.rejects(client.account.get(), ModelUnavailableError);
  assert.equal(world.proxy.requestsTo("GET", "/account").length, 3);
});

for (const [status, errorClass] of [[429, RateLimitedError], [500, InternalServerError], [502, UpstreamError], [503, ModelUnavailableError]] as const) {
  test(`without retries ${status} rejects with ${errorClass.name}`, async () => {
    const client = world.client(world.account(), { maxRetries: 0 });
    world.proxy.inject({ method: "GET", pathPrefix: "/account", status, count: 1 });
    await assert.rejects(client.account.get(), errorClass);
  });
}

test("other client errors are never retried", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.generations.create(ENDPOINT, { prompt: "x", unknown_field: 1 }), InvalidRequestError);
  await assert.rejects(client.generations.get("gen_doesnotexist"), NotFoundError);
  assert.equal(world.proxy.requestsTo("POST", "/run/").length, 1);
  assert.equal(world.proxy.requestsTo("GET", "/generations/gen_doesnotexist").length, 1);
});

test("Retry-After sets the shortest wait", async () => {
  const client = world.client(world.account());
  const delays: number[] = [];
  client.onRetry = (event) => delays.push(event.delay);
  world.proxy.inject({ method: "GET", pathPrefix: "/account", status: 429, count: 1, headers: { "retry-after": "1" } });
  await client.account.get();
  assert.equal(delays.length, 1);
  assert.ok(delays[0]! >= 1000, `waited ${delays[0]} ms`);
});

test("a Retry-After longer than allowed rejects at once", async () => {
  const client = world.client(world.account(), { maxRetryAfter: 5000 });
  world.proxy.inject({ method: "GET", pathPrefix: "/account", status: 429, count: 1, headers: { "retry-after": "3600" } });
  await assert.rejects(client.account.get(), RateLimitedError);
  assert.equal(world.proxy.requestsTo("GET", "/account").length, 1);
});

test("a submit whose answer was lost is billed once", async () => {
  const client = world.client(world.account());
  world.proxy.inject({ method: "POST", pathPrefix: "/run/", status: 502, count: 1, forwardFirst: true });
  const generation = await client.generations.create(ENDPOINT, { prompt: "billed once", ...SMALL });
  const submits = world.proxy.requestsTo("POST", "/run/");
  assert.deepEqual(submits.map((seen) => seen.status), [502, 202]);
  assert.equal(submits[0]!.headers["idempotency-key"], submits[1]!.headers["idempotency-key"]);
  const listed = [];
  for await (const listedGeneration of client.generations.list()) listed.push(listedGeneration.id);
  assert.deepEqual(listed, [generation.id]);
  await client.generations.wait(generation.id);
  const account = await client.account.get();
  assert.equal(account.balance_usd, 99.9);
  assert.equal(account.held_usd, 0);
});

test("a given idempotency key replays, a changed body conflicts", async () => {
  const client = world.client(world.account());
  const first = await client.generations.create(ENDPOINT, { prompt: "keyed", ...SMALL }, { idempotencyKey: "k-1" });
  const again = await client.generations.create(ENDPOINT, { prompt: "keyed", ...SMALL }, { idempotencyKey: "k-1" });
  assert.equal(again.id, first.id);
  await assert.rejects(
    client.generations.create(ENDPOINT, { prompt: "other", ...SMALL }, { idempotencyKey: "k-1" }),
    (error: unknown) => error instanceof ConflictError && error.param === "Idempotency-Key",
  );
  await client.generations.wait(first.id);
});

test("no answer at all is a connection error after retries", async () => {
  const client = new Vidgate({ apiKey: "vg_live_x", baseUrl: "http://127.0.0.1:9/api/v1", maxRetries: 1, retryInitialDelay: 10 });
  await assert.rejects(client.account.get(), APIConnectionError);
});

test("a submit that got no answer is resent and billed once", async () => {
  const client = world.client(world.account());
  world.proxy.inject({ method: "POST", pathPrefix: "/run/", status: 0, count: 1, forwardFirst: true });
  const generation = await client.generations.create(ENDPOINT, { prompt: "no answer", ...SMALL });
  assert.deepEqual(world.proxy.requestsTo("POST", "/run/").map((seen) => seen.status), [0, 202]);
  const listed = [];
  for await (const listedGeneration of client.generations.list()) listed.push(listedGeneration.id);
  assert.deepEqual(listed, [generation.id]);
  await client.generations.wait(generation.id);
});

test("reads are resent after no answer, but a rotation is not", async () => {
  const client = world.client(world.account());
  world.proxy.inject({ method: "GET", pathPrefix: "/account", status: 0, count: 1 });
  assert.equal((await client.account.get()).balance_usd, 100);
  assert.deepEqual(world.proxy.requestsTo("GET", "/account").map((seen) => seen.status), [0, 200]);
  // A second rotation would drop the secret receivers still use, so a
  // rotation whose answer was lost is reported, not repeated.
  world.proxy.inject({ method: "POST", pathPrefix: "/account/webhook-secret/rotate", status: 0, count: 1, forwardFirst: true });
  await assert.rejects(client.webhooks.rotateSecret(), APIConnectionError);
  assert.equal(world.proxy.requestsTo("POST", "/account/webhook-secret/rotate").length, 1);
});
