/**
 * vidgate: the TypeScript library for the vidgate video generation API.
 *
 * ```ts
 * import { Vidgate } from "vidgate";
 * const vidgate = new Vidgate(); // VIDGATE_API_KEY, VIDGATE_BASE_URL on Node
 * const generation = await vidgate.run("vendor_1/model_1/text-to-video", { prompt: "a red kite" });
 * console.log(generation.output?.video_url);
 * ```
 */

export {
  Vidgate,
  Generations,
  Models,
  Uploads,
  AccountResource,
  Webhooks,
  VERSION,
  DEFAULT_BASE_URL,
  RETRYABLE_STATUSES,
  backoffDelay,
  parseRetryAfter,
  EventStreamParser,
  MAX_WAIT_SECONDS,
} from "./client.js";
export type {
  ClientOptions,
  CreateOptions,
  WaitOptions,
  ListOptions,
  FileInput,
  UploadOptions,
  RetryListener,
  StreamEvent,
} from "./client.js";
export * from "./errors.js";
export * from "./types.js";
export * as webhooks from "./webhooks.js";
export type { HeadersLike, VerifyOptions } from "./webhooks.js";
export { Vidgate as default } from "./client.js";
