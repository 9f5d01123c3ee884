// Each spec error code the server can be made to answer, as its class.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AuthenticationError,
  DirectUploadUnavailableError,
  InsufficientBalanceError,
  InvalidRequestError,
  ModelUnavailableError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitedError,
  Vidgate,
} from "../src/index.js";
import { ENDPOINT, SMALL, joinSharedWorld, type World } from "./harness.js";

let world: World;
joinSharedWorld((started) => (world = started));

test("invalid_request names the parameter", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.generations.create(ENDPOINT, { prompt: "x", duration: 99 }), (error: unknown) => {
    assert.ok(error instanceof InvalidRequestError);
    assert.equal(error.status, 400);
    assert.equal(error.param, "duration");
    return true;
  });
  await assert.rejects(client.quote(ENDPOINT, { bogus: true }), (error: unknown) => error instanceof InvalidRequestError && error.param === "bogus");
});

test("unauthorized", async () => {
  const client = new Vidgate({ apiKey: "vg_live_not_a_key", baseUrl: world.proxy.baseUrl });
  await assert.rejects(client.account.get(), (error: unknown) => error instanceof AuthenticationError && error.code === "unauthorized");
});

test("insufficient_balance holds nothing", async () => {
  const client = world.client(world.account({ creditUsd: "0" }));
  await assert.rejects(client.generations.create(ENDPOINT, { prompt: "too dear", ...SMALL }), InsufficientBalanceError);
  assert.equal((await client.account.get()).held_usd, 0);
});

test("not_found", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.generations.get("gen_doesnotexist"), NotFoundError);
  await assert.rejects(client.models.get("vendor_9/model_9"), NotFoundError);
  await assert.rejects(client.generations.create("vendor_9/model_9/text-to-video", { prompt: "x" }), NotFoundError);
  const mine = await client.generations.create(ENDPOINT, { prompt: "mine", ...SMALL });
  const stranger = world.client(world.account());
  await assert.rejects(stranger.generations.get(mine.id), NotFoundError);
  await client.generations.wait(mine.id);
});

test("payload_too_large", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.generations.create(ENDPOINT, { prompt: "x".repeat(300_000) }), PayloadTooLargeError);
});

test("rate_limited by request rate", async () => {
  const client = world.client(world.account({ rps: 1, burst: 1 }), { maxRetries: 0 });
  await assert.rejects(async () => {
    for (let n = 0; n < 10; n++) await client.account.get();
  }, RateLimitedError);
});

test("rate_limited by concurrency", async () => {
  const client = world.client(world.account({ concurrency: 1 }), { maxRetries: 0 });
  const first = await client.generations.create(ENDPOINT, { prompt: "[sim:sleep=3000] one", ...SMALL });
  await assert.rejects(client.generations.create(ENDPOINT, { prompt: "two", ...SMALL }), RateLimitedError);
  await client.generations.wait(first.id);
});

test("model_unavailable while paused", async () => {
  const client = world.client(world.account(), { maxRetries: 1 });
  world.server.admin("model", "pause", "vendor_3/model_3");
  try {
    await assert.rejects(client.generations.create("vendor_3/model_3/text-to-video", { prompt: "paused" }), ModelUnavailableError);
  } finally {
    world.server.admin("model", "resume", "vendor_3/model_3");
  }
});

test("direct_upload_unavailable on local disk", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.uploads.initiate({ contentType: "image/png", sizeBytes: 10 }), DirectUploadUnavailableError);
});
