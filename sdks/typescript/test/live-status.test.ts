// Live status: wait and run hold each read on the server (Prefer: wait),
// stream follows the event stream, and both fall back to polling a server
// without them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { NotFoundError, type Generation } from "../src/index.js";
import { ENDPOINT, SMALL, joinSharedWorld, type World } from "./harness.js";

const SLOW = { prompt: "[sim:sleep=2500] a slow paper boat", ...SMALL };

let world: World;
joinSharedWorld((started) => (world = started));

/** The Prefer header of each read of the generation ("" when none). */
function readsOf(id: string): string[] {
  return world.proxy
    .requestsTo("GET", `/generations/${id}`)
    .filter((seen) => seen.path.endsWith(id))
    .map((seen) => seen.headers["prefer"] ?? "");
}

async function collect(stream: AsyncIterable<Generation>): Promise<Generation[]> {
  const seen: Generation[] = [];
  for await (const generation of stream) seen.push(generation);
  return seen;
}

test("wait asks the server to hold the read until the generation is final", async () => {
  const client = world.client(world.account());
  const created = await client.generations.create(ENDPOINT, SLOW);
  const finished = await client.generations.wait(created.id, { timeout: 120_000 });
  assert.equal(finished.status, "succeeded");
  // One read, held until the job ended: polling at the proxy's 1 s hint would take two or more.
  assert.deepEqual(readsOf(created.id), ["wait=60"]);
});

test("wait polls a server without waits", async () => {
  const client = world.client(world.account());
  const created = await client.generations.create(ENDPOINT, SLOW);
  world.proxy.stripRequestHeaders.add("prefer");
  try {
    const finished = await client.generations.wait(created.id, { timeout: 120_000 });
    assert.equal(finished.status, "succeeded");
  } finally {
    world.proxy.stripRequestHeaders.delete("prefer");
  }
  assert.ok(readsOf(created.id).length >= 2);
});

test("stream yields each change until the final one", async () => {
  const client = world.client(world.account());
  const created = await client.generations.create(ENDPOINT, SLOW);
  const seen = await collect(client.generations.stream(created.id));
  const statuses = seen.map((generation) => generation.status);
  assert.equal(statuses.at(-1), "succeeded", statuses.join(" → "));
  assert.equal(new Set(statuses).size, statuses.length);
  assert.match(seen.at(-1)?.output?.video_url ?? "", /^http/);
  assert.ok(seen.every((generation) => generation.id === created.id));
});

test("stream polls a server without streams", async () => {
  const client = world.client(world.account());
  const created = await client.generations.create(ENDPOINT, SLOW);
  world.proxy.inject({ method: "GET", pathPrefix: `/generations/${created.id}/events`, status: 404, count: 1 });
  const statuses = (await collect(client.generations.stream(created.id))).map((generation) => generation.status);
  assert.equal(statuses.at(-1), "succeeded", statuses.join(" → "));
  assert.equal(new Set(statuses).size, statuses.length);
  assert.equal(world.proxy.requestsTo("GET", `/generations/${created.id}/events`).length, 1);
});

test("stream of an unknown generation rejects with NotFoundError", async () => {
  const client = world.client(world.account());
  await assert.rejects(collect(client.generations.stream("gen_doesnotexist")), NotFoundError);
});
