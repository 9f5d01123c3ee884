// OpenRouter's own TypeScript SDK (@openrouter/sdk, pinned by package-lock.json)
// against vidgate's /api/v1/videos. tests/it/dialects/openrouter.rs runs it
// with Node after `npm ci` here: `node drive.mjs <api base> <key> <image url>`.
// It uses only what a customer would: `new OpenRouter({ serverURL, apiKey })`
// and `videoGeneration`, whose response schemas are strict (a create must
// answer 202, errors must carry a numeric code, models every VideoModel key).
// Prints `openrouter: ... ok` lines and `ids: <id> ...` of what it made.

import { OpenRouter } from "@openrouter/sdk";
import { BadRequestResponseError, NotFoundResponseError, UnauthorizedResponseError } from "@openrouter/sdk/models/errors";

const [base, apiKey, imageUrl] = process.argv.slice(2);
// The SDK retries 5xx for up to an hour by default; a test wants the answer.
const retryConfig = { strategy: "none" };
const client = new OpenRouter({ serverURL: base, apiKey, retryConfig });
const model = "vendor_1/model_1";
const made = [];

function check(condition, message) {
  if (!condition) {
    console.log(`FAILED: ${typeof message === "string" ? message : JSON.stringify(message)}`);
    process.exit(1);
  }
}

async function expectError(kind, call, status) {
  try {
    await call();
  } catch (error) {
    check(error instanceof kind, `${kind.name} expected, got ${error?.constructor?.name}: ${error}`);
    check(error.statusCode === status, `status ${status}: ${error.statusCode}`);
    return error;
  }
  check(false, `${kind.name} expected, nothing thrown`);
}

async function untilDone(id) {
  for (let attempt = 0; attempt < 300; attempt++) {
    const job = await client.videoGeneration.getGeneration({ jobId: id });
    if (!["pending", "in_progress"].includes(job.status)) return job;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  check(false, `${id} did not finish`);
}

const listed = await client.videoGeneration.listVideosModels();
const listedModel = listed.data.find((entry) => entry.id === model);
check(listedModel, `the model is listed: ${JSON.stringify(listed.data.map((entry) => entry.id))}`);
check(listedModel.supportedResolutions.includes("480p"), listedModel);
check(listedModel.supportedSizes.includes("854x480"), listedModel);
check(listedModel.supportedFrameImages.includes("first_frame"), listedModel);
check(listedModel.seed === true && listedModel.generateAudio === true, listedModel);
check(Array.isArray(listedModel.supportedDurations) && listedModel.supportedDurations.includes(2), listedModel);
console.log("openrouter: listVideosModels ok");

const job = await client.videoGeneration.generate({
  videoGenerationRequest: {
    model,
    prompt: "a kite from OpenRouter's SDK",
    duration: 2,
    resolution: "480p",
    aspectRatio: "16:9",
    generateAudio: false,
    seed: 7,
  },
});
made.push(job.id);
check(job.status === "pending" && job.pollingUrl.endsWith(`/videos/${job.id}`), job);
const done = await untilDone(job.id);
check(done.status === "completed", done);
check(done.usage && done.usage.cost > 0, done);
check(done.unsignedUrls && done.unsignedUrls.length === 1, done);
console.log("openrouter: generate, getGeneration ok");

const stream = await client.videoGeneration.getVideoContent({ jobId: job.id, index: 0 });
const chunks = [];
for await (const chunk of stream) chunks.push(chunk);
const mp4 = Buffer.concat(chunks);
check(mp4.length > 1000 && mp4.subarray(4, 8).toString() === "ftyp", `an MP4: ${mp4.length}`);
console.log("openrouter: getVideoContent ok");

const fromImage = await client.videoGeneration.generate({
  videoGenerationRequest: {
    model,
    prompt: "the picture, moving",
    duration: 2,
    resolution: "480p",
    frameImages: [{ type: "image_url", imageUrl: { url: imageUrl }, frameType: "first_frame" }],
  },
});
made.push(fromImage.id);
check((await untilDone(fromImage.id)).status === "completed", "image-to-video completes");
console.log("openrouter: frame_images ok");

const invalid = await expectError(
  BadRequestResponseError,
  () => client.videoGeneration.generate({ videoGenerationRequest: { model, prompt: "x", duration: 99 } }),
  400,
);
check(invalid.error.code === 400 && invalid.error.metadata.param === "duration", invalid.error);
await expectError(NotFoundResponseError, () => client.videoGeneration.getGeneration({ jobId: "gen_nothing" }), 404);
const stranger = new OpenRouter({ serverURL: base, apiKey: "vg_live_wrong", retryConfig });
await expectError(UnauthorizedResponseError, () => stranger.videoGeneration.getGeneration({ jobId: job.id }), 401);
console.log("openrouter: errors ok");

console.log(`ids: ${made.join(" ")}`);
