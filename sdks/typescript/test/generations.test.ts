// Every generation, catalog and account method against a real server.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConflictError, GenerationFailedError, Vidgate, WaitTimeoutError } from "../src/index.js";
import { ENDPOINT, SMALL, joinSharedWorld, type World } from "./harness.js";

let world: World;
joinSharedWorld((started) => (world = started));

test("run submits, waits and resolves to the clip", async () => {
  const client = world.client(world.account());
  const generation = await client.run(ENDPOINT, { prompt: "a paper boat on a pond", ...SMALL });
  assert.equal(generation.status, "succeeded");
  assert.match(generation.output?.video_url ?? "", /^http/);
  assert.equal(generation.output?.duration_s, 2);
  assert.equal(generation.cost.estimated, false);
  assert.equal(generation.cost.amount_usd, 0.1);
  const [submit, ...others] = world.proxy.requestsTo("POST", "/run/");
  assert.equal(others.length, 0);
  assert.match(submit!.headers["idempotency-key"] ?? "", /^vidgate-typescript-/);
  assert.ok(world.proxy.requestsTo("GET", `/generations/${generation.id}`).length >= 1);
});

test("create, get and wait", async () => {
  const client = world.client(world.account());
  const created = await client.generations.create(ENDPOINT, { prompt: "a lighthouse at dusk", ...SMALL });
  assert.equal(created.status, "queued");
  assert.equal(created.output, null);
  assert.ok(created.urls.get.endsWith(created.id));
  const fetched = await client.generations.get(created.id);
  assert.equal(fetched.input["prompt"], "a lighthouse at dusk");
  const finished = await client.generations.wait(created.id, { timeout: 120_000 });
  assert.equal(finished.status, "succeeded");
});

test("wait gives up after its timeout", async () => {
  const client = world.client(world.account());
  const slow = await client.generations.create(ENDPOINT, { prompt: "[sim:sleep=20000] slow", ...SMALL });
  await assert.rejects(client.generations.wait(slow.id, { timeout: 500 }), (error: unknown) => {
    assert.ok(error instanceof WaitTimeoutError);
    assert.equal(error.generation.id, slow.id);
    return true;
  });
});

test("run rejects when the generation fails, refunded", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.run(ENDPOINT, { prompt: "[sim:fail] doomed", ...SMALL }), (error: unknown) => {
    assert.ok(error instanceof GenerationFailedError);
    assert.equal(error.generation.status, "failed");
    assert.ok(error.generation.error?.code);
    assert.equal(error.generation.cost.amount_usd, 0);
    return true;
  });
});

test("cancel a queued generation, and a finished one conflicts", async () => {
  const client = world.client(world.account());
  // Two slow jobs keep both workers busy, so the third stays queued.
  const blockers = [];
  for (const n of [1, 2]) {
    blockers.push(await client.generations.create(ENDPOINT, { prompt: `[sim:sleep=4000] blocker ${n}`, ...SMALL }));
  }
  const queued = await client.generations.create(ENDPOINT, { prompt: "never runs", ...SMALL });
  const canceled = await client.generations.cancel(queued.id);
  assert.equal(canceled.status, "canceled");
  const finished = await client.generations.wait(blockers[0]!.id);
  await assert.rejects(client.generations.cancel(finished.id), (error: unknown) => {
    assert.ok(error instanceof ConflictError);
    assert.equal(error.status, 409);
    assert.ok(error.requestId);
    return true;
  });
});

test("list walks every page with filters", async () => {
  const client = world.client(world.account());
  const created = [];
  for (let n = 0; n < 5; n++) created.push(await client.generations.create(ENDPOINT, { prompt: `page item ${n}`, ...SMALL }));
  world.proxy.clear();
  const listed = [];
  for await (const generation of client.generations.list({ limit: 2 })) listed.push(generation.id);
  assert.deepEqual(listed, created.map((g) => g.id).reverse());
  assert.equal(world.proxy.requestsTo("GET", "/generations?").length, 3);
  const page = await client.generations.listPage({ limit: 2 });
  assert.equal(page.has_more, true);
  assert.equal(page.data.length, 2);
  for (const generation of created) await client.generations.wait(generation.id);
  const succeeded = [];
  for await (const generation of client.generations.list({ status: "succeeded", model: "vendor_1/model_1" })) {
    succeeded.push(generation.id);
  }
  assert.deepEqual(new Set(succeeded), new Set(created.map((g) => g.id)));
  for await (const generation of client.generations.list({ status: "failed" })) assert.fail(`unexpected ${generation.id}`);
});

test("quote equals the held price", async () => {
  const client = world.client(world.account());
  const quote = await client.quote(ENDPOINT, { duration: 3, resolution: "720p" });
  assert.equal(quote.cost.amount_usd, 0.3);
  assert.equal(quote.endpoint, ENDPOINT);
  const generation = await client.generations.create(ENDPOINT, { prompt: "priced", duration: 3, resolution: "720p", generate_audio: false });
  assert.equal(generation.cost.amount_usd, quote.cost.amount_usd);
  await client.generations.wait(generation.id);
});

test("public methods need no key", async () => {
  const anonymous = new Vidgate({ apiKey: "", baseUrl: world.proxy.baseUrl });
  const models = await anonymous.models.list();
  assert.ok(models.some((model) => model.id === "vendor_6/model_6"));
  const model = await anonymous.models.get("vendor_1/model_1");
  assert.deepEqual(model.modes, ["text-to-video", "image-to-video", "reference-to-video"]);
  assert.equal(model.endpoints[0]?.id, "vendor_1/model_1/text-to-video");
  assert.ok((await anonymous.quote(ENDPOINT, {})).cost.amount_usd > 0);
  assert.match(String((await anonymous.openapi())["openapi"]), /^3\.1/);
});

test("account shows balance and holds", async () => {
  const client = world.client(world.account());
  const before = await client.account.get();
  assert.equal(before.balance_usd, 100);
  assert.equal(before.held_usd, 0);
  const generation = await client.generations.create(ENDPOINT, { prompt: "[sim:sleep=3000] held", ...SMALL });
  assert.equal((await client.account.get()).held_usd, 0.1);
  await client.generations.wait(generation.id);
  const after = await client.account.get();
  assert.equal(after.held_usd, 0);
  assert.equal(after.balance_usd, 99.9);
});
