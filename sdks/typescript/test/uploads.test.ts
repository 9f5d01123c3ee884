// Uploads: multipart to vidgate, and the fallback from presigned uploads.
import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { DirectUploadUnavailableError, InvalidRequestError, Vidgate } from "../src/index.js";
import { Moto, Server, joinSharedWorld, type World, pngBytes } from "./harness.js";

let world: World;
joinSharedWorld((started) => (world = started));

test("upload a path and use it in a request", async () => {
  const client = world.client(world.account());
  const path = join(mkdtempSync(join(tmpdir(), "vidgate-sdk-upload-")), "opening.png");
  writeFileSync(path, pngBytes());
  const upload = await client.uploads.create(path);
  assert.match(upload.id, /^upl_/);
  assert.equal(upload.content_type, "image/png");
  assert.equal(upload.media?.width, 320);
  // On local disk the presigned flow answers 501 once; then this client goes straight to multipart.
  assert.deepEqual(world.proxy.requestsTo("POST", "/uploads/initiate").map((seen) => seen.status), [501]);
  await client.uploads.create(new Blob([pngBytes()]), { filename: "again.png" });
  assert.equal(world.proxy.requestsTo("POST", "/uploads/initiate").length, 1);
  const generation = await client.run("vendor_1/model_1/image-to-video", {
    prompt: "slow zoom", image_url: upload.url, duration: 2, resolution: "480p", generate_audio: false,
  });
  assert.equal(generation.status, "succeeded");
});

test("upload bytes with multipart only", async () => {
  const client = world.client(world.account());
  const upload = await client.uploads.create(pngBytes(), { filename: "still.png", direct: false });
  assert.equal(upload.size_bytes, pngBytes().length);
  assert.notEqual(upload.created_at, null);
  assert.equal(world.proxy.requestsTo("POST", "/uploads/initiate").length, 0);
});

test("direct only rejects where the deployment has no bucket", async () => {
  const client = world.client(world.account());
  await assert.rejects(client.uploads.create(pngBytes(), { filename: "still.png", direct: true }), DirectUploadUnavailableError);
});

test("a file that is not media is refused", async () => {
  const client = world.client(world.account());
  await assert.rejects(
    client.uploads.create(new TextEncoder().encode("just text"), { filename: "notes.txt", direct: false }),
    (error: unknown) => error instanceof InvalidRequestError && error.param === "file",
  );
});

const motoProgram = process.env["VIDGATE_TEST_MOTO_SERVER"];
test("a presigned upload goes to the bucket and renders", { skip: motoProgram ? false : "VIDGATE_TEST_MOTO_SERVER is not set (see .ci/run)" }, async () => {
  const moto = await Moto.start(motoProgram!);
  const server = await Server.start(moto);
  try {
    const account = server.account("sdk-ts-bucket");
    const client = new Vidgate({ apiKey: account.api_key, baseUrl: server.apiBase });
    const upload = await client.uploads.create(pngBytes(), { filename: "opening.png" });
    assert.match(upload.id, /^upl_/);
    assert.equal(upload.content_type, "image/png");
    // Not probed yet: the server probes it when a request first uses it.
    assert.equal(upload.media, null);
    const generation = await client.run("vendor_1/model_1/image-to-video", {
      prompt: "from the bucket", image_url: upload.url, duration: 2, resolution: "480p", generate_audio: false,
    });
    assert.equal(generation.status, "succeeded");
    const pending = await client.uploads.initiate({ contentType: "image/png", sizeBytes: 10 });
    assert.equal(pending.method, "PUT");
    assert.deepEqual(pending.headers, { "Content-Type": "image/png" });
  } finally {
    await server.stop();
    moto.stop();
  }
});
