/**
 * The client, `new Vidgate(options)`, and its resources. It follows SPEC.md
 * section 7: retry 429, 500, 502 and 503 (and requests that got no answer)
 * with exponential backoff and jitter (about 1, 2, 4, 8 s, capped at 30 s),
 * never sooner than `Retry-After`; never retry other 4xx; and send every
 * submit with an `Idempotency-Key`, so a retry cannot bill twice.
 */

import {
  APIConnectionError,
  APITimeoutError,
  DirectUploadUnavailableError,
  GenerationFailedError,
  NotFoundError,
  WaitTimeoutError,
  errorFromResponse,
} from "./errors.js";
import type {
  Account,
  AnyWebhookEvent,
  CheckoutSession,
  DirectUpload,
  Generation,
  GenerationPage,
  GenerationStatus,
  Model,
  Quote,
  Upload,
  WebhookDelivery,
  WebhookSecret,
} from "./types.js";
import { FINAL_STATUSES } from "./types.js";
import * as webhooks from "./webhooks.js";

export const VERSION = "0.1.0";
export const DEFAULT_BASE_URL = "http://127.0.0.1:8080/api/v1";
/** The statuses SPEC.md section 7 says to retry with backoff; never others. */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([429, 500, 502, 503]);
/** SPEC.md section 6: poll a video no tighter than every 5 s, when the answer has no `Retry-After`. */
export const DEFAULT_POLL_INTERVAL_MS = 5000;
/** The longest `Prefer: wait` a server grants, in seconds. */
export const MAX_WAIT_SECONDS = 60;

export interface ClientOptions {
  /** The API key, `vg_live_…`; default `VIDGATE_API_KEY` on Node. Public methods work without one. */
  apiKey?: string | undefined;
  /** The API's base URL, ending in `/api/v1`; default `VIDGATE_BASE_URL` on Node, else the local server. */
  baseUrl?: string | undefined;
  /** Milliseconds one request may take (default 60 000). */
  timeout?: number;
  /** Retries of a request refused with 429/500/502/503 or unanswered (default 4). */
  maxRetries?: number;
  /** The first backoff in milliseconds, doubled on each retry (default 1 000). */
  retryInitialDelay?: number;
  /** The longest backoff in milliseconds before jitter (default 30 000). */
  retryMaxDelay?: number;
  /** A `Retry-After` longer than this (milliseconds) is not waited out: the error is thrown (default 120 000). */
  maxRetryAfter?: number;
  /** The secret `webhooks.verify` uses by default; default `VIDGATE_WEBHOOK_SECRET` on Node. */
  webhookSecret?: string | undefined;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

export interface CreateOptions {
  /** Where the finished generation is POSTed (signed; see `webhooks.verify`). */
  webhookUrl?: string;
  /** Replays the original generation for the same key and body within 24 h; generated when absent. */
  idempotencyKey?: string;
}

export interface WaitOptions {
  /** Milliseconds to wait before throwing {@link WaitTimeoutError} (default: no limit). */
  timeout?: number;
}

export interface ListOptions {
  status?: GenerationStatus;
  /** A model id, `vendor/model`. */
  model?: string;
  /** The page size, 1–100 (default 20). */
  limit?: number;
}

/** What `uploads.create` takes: bytes, a Blob or File, or (on Node) a path. */
export type FileInput = Blob | Uint8Array | ArrayBuffer | string;

export interface UploadOptions {
  filename?: string;
  contentType?: string;
  /**
   * `undefined`: a presigned upload straight to the deployment's bucket when
   * it offers one, else multipart to vidgate; `false`: always multipart;
   * `true`: presigned only.
   */
  direct?: boolean;
}

/** The media types vidgate accepts, by file extension. */
const UPLOAD_MEDIA_TYPES: Readonly<Record<string, string>> = {
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  png: "image/png",
  webp: "image/webp",
  mp4: "video/mp4",
  mov: "video/quicktime",
  mp3: "audio/mpeg",
  wav: "audio/wav",
};

/** One API request, before it is sent. */
export interface Call {
  method: string;
  path: string;
  json?: unknown;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  /** Built again for each attempt, as a sent body cannot be sent twice. */
  form?: () => FormData;
  bytes?: ArrayBuffer;
  /**
   * Whether the request may be sent again after it got no answer (it may
   * have been carried out). By default reads and submits may (a submit's
   * Idempotency-Key makes the server replay the first); a cancel, a webhook
   * re-send or a secret rotation may not, as a second one would differ.
   */
  resendUnanswered?: boolean;
  /** Milliseconds the server may take beyond the client's timeout (a wait). */
  extraTimeout?: number;
  /** An event stream: the timeout covers the answer's head, not its endless body. */
  streamed?: boolean;
}

function mayResendUnanswered(call: Call): boolean {
  return call.resendUnanswered ?? (["GET", "HEAD", "PUT"].includes(call.method) || call.headers?.["Idempotency-Key"] !== undefined);
}

/** A client's options after reading the environment. */
export interface Settings {
  apiKey: string | undefined;
  baseUrl: string;
  timeout: number;
  maxRetries: number;
  retryInitialDelay: number;
  retryMaxDelay: number;
  maxRetryAfter: number;
  webhookSecret: string | undefined;
  fetch: typeof fetch;
}

function environment(name: string): string | undefined {
  const process = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  try {
    return process?.env?.[name];
  } catch {
    // Deno without --allow-env refuses to read the environment: options only.
    return undefined;
  }
}

/** Milliseconds from a `Retry-After` header: seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Number(trimmed) * 1000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/**
 * The wait before retry number `retry` (0-based), in ms: about 1, 2, 4, 8 s,
 * capped at 30 s, plus up to 25 % jitter so that clients refused together
 * do not return together; never shorter than `Retry-After`.
 */
export function backoffDelay(
  retry: number,
  retryAfter: number | undefined,
  settings: Pick<Settings, "retryInitialDelay" | "retryMaxDelay">,
  randomFraction: () => number = Math.random,
): number {
  const base = Math.min(settings.retryMaxDelay, settings.retryInitialDelay * 2 ** retry);
  const delay = base + base * 0.25 * randomFraction();
  return retryAfter === undefined ? delay : Math.max(delay, retryAfter);
}

const sleep = (milliseconds: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, milliseconds));

function randomKey(): string {
  const crypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (crypto?.randomUUID !== undefined) return crypto.randomUUID();
  // Node 18 keeps Web Crypto off the global object; the key needs to be
  // unique, not secret.
  return Array.from({ length: 4 }, () => Math.random().toString(16).slice(2, 10)).join("-");
}

function segment(identifier: string): string {
  if (identifier === "") throw new TypeError("an id must not be empty");
  return encodeURIComponent(identifier);
}

function idPath(id: string, parts: number, what: string): string {
  const segments = id.replace(/^\/+|\/+$/g, "").split("/");
  if (segments.length !== parts || segments.some((part) => part === "")) {
    throw new TypeError(`a ${what} id is ${parts === 3 ? "vendor/model/mode" : "vendor/model"}, not ${JSON.stringify(id)}`);
  }
  return segments.map(encodeURIComponent).join("/");
}

/** Observes retries (for logging): the call, the error that caused it, the wait in ms. */
export type RetryListener = (event: { method: string; path: string; error: Error; delay: number; retry: number }) => void;

/** A vidgate API client. */
export class Vidgate {
  readonly generations: Generations;
  readonly models: Models;
  readonly uploads: Uploads;
  readonly account: AccountResource;
  readonly webhooks: Webhooks;
  /** Called before each retry's wait; for logging. */
  onRetry: RetryListener | undefined;
  /** @internal */
  readonly settings: Settings;

  constructor(options: ClientOptions = {}) {
    const maxRetries = options.maxRetries ?? 4;
    if (!Number.isInteger(maxRetries) || maxRetries < 0) throw new RangeError("maxRetries must be 0 or more");
    const fetchFunction = options.fetch ?? globalThis.fetch;
    if (fetchFunction === undefined) throw new TypeError("no fetch: pass one in the options");
    this.settings = {
      apiKey: options.apiKey ?? environment("VIDGATE_API_KEY"),
      baseUrl: (options.baseUrl ?? environment("VIDGATE_BASE_URL") ?? DEFAULT_BASE_URL).replace(/\/+$/, ""),
      timeout: options.timeout ?? 60_000,
      maxRetries,
      retryInitialDelay: options.retryInitialDelay ?? 1000,
      retryMaxDelay: options.retryMaxDelay ?? 30_000,
      maxRetryAfter: options.maxRetryAfter ?? 120_000,
      webhookSecret: options.webhookSecret ?? environment("VIDGATE_WEBHOOK_SECRET"),
      fetch: fetchFunction.bind(globalThis),
    };
    this.generations = new Generations(this);
    this.models = new Models(this);
    this.uploads = new Uploads(this);
    this.account = new AccountResource(this);
    this.webhooks = new Webhooks(this);
  }

  get baseUrl(): string {
    return this.settings.baseUrl;
  }

  /**
   * Submits a generation and waits until it is finished, the server holding
   * each read until it is (see `generations.wait`). Resolves to the
   * succeeded generation (`output.video_url` is the clip); rejects with
   * {@link GenerationFailedError} if it failed or was canceled (refunded),
   * and {@link WaitTimeoutError} after `timeout` ms.
   */
  async run(
    endpoint: string,
    input: Record<string, unknown>,
    options: CreateOptions & WaitOptions = {},
  ): Promise<Generation> {
    const created = await this.generations.create(endpoint, input, options);
    const finished = await this.generations.wait(created.id, options);
    if (finished.status !== "succeeded") {
      const reason = finished.error ? `: ${finished.error.code}: ${finished.error.message}` : "";
      throw new GenerationFailedError(`Generation ${finished.id} ended ${finished.status}${reason}`, finished);
    }
    return finished;
  }

  /** The price of a request without running it (no key needed). */
  async quote(endpoint: string, input: Record<string, unknown>): Promise<Quote> {
    const path = `/quote/${idPath(endpoint, 3, "endpoint")}`;
    return this.json<Quote>({ method: "POST", path, json: input, resendUnanswered: true });
  }

  /** The server's OpenAPI 3.1 document. */
  async openapi(): Promise<Record<string, unknown>> {
    return this.json<Record<string, unknown>>({ method: "GET", path: "/openapi.json" });
  }

  /** @internal Sends a call, retrying as SPEC.md section 7 advises; resolves to a 2xx answer. */
  async send(call: Call): Promise<Response> {
    const absolute = /^https?:\/\//.test(call.path);
    const url = new URL(absolute ? call.path : this.settings.baseUrl + call.path);
    for (const [name, value] of Object.entries(call.query ?? {})) url.searchParams.set(name, value);
    const headers: Record<string, string> = absolute
      ? { ...call.headers }
      : { "User-Agent": `vidgate-typescript/${VERSION}`, Accept: "application/json", ...call.headers };
    if (!absolute && this.settings.apiKey) headers["Authorization"] = `Bearer ${this.settings.apiKey}`;
    if (call.json !== undefined) headers["Content-Type"] = "application/json";
    for (let retry = 0; ; retry++) {
      let response: Response | undefined;
      let error: Error | undefined;
      const timeout = this.settings.timeout + (call.extraTimeout ?? 0);
      // A stream's body is read for as long as it lasts: only its head is
      // timed, by a timer cleared once it came.
      const streamAbort = call.streamed === true ? new AbortController() : undefined;
      const streamTimer = streamAbort === undefined ? undefined : setTimeout(() => streamAbort.abort(), timeout);
      const signal = streamAbort?.signal ?? AbortSignal.timeout(timeout);
      const body: BodyInit | null =
        call.json !== undefined ? JSON.stringify(call.json) : (call.form?.() ?? call.bytes ?? null);
      try {
        response = await this.settings.fetch(url, { method: call.method, headers, body, signal });
      } catch (cause) {
        error = signal.aborted
          ? new APITimeoutError(`${call.method} ${call.path} timed out`, { cause })
          : new APIConnectionError(`${call.method} ${call.path} failed: ${String(cause)}`, { cause });
      } finally {
        clearTimeout(streamTimer);
      }
      let retryAfter: number | undefined;
      if (response !== undefined) {
        if (response.ok) return response;
        const body: unknown = await response.json().catch(() => undefined);
        error = errorFromResponse(response.status, body, response.headers.get("x-request-id") ?? undefined);
        if (!RETRYABLE_STATUSES.has(response.status)) throw error;
        retryAfter = parseRetryAfter(response.headers.get("retry-after"));
      }
      if (error === undefined) throw new TypeError("unreachable: no answer and no error");
      if (response === undefined && !mayResendUnanswered(call)) throw error;
      if (retry >= this.settings.maxRetries) throw error;
      if (retryAfter !== undefined && retryAfter > this.settings.maxRetryAfter) throw error;
      const delay = backoffDelay(retry, retryAfter, this.settings);
      this.onRetry?.({ method: call.method, path: call.path, error, delay, retry: retry + 1 });
      await sleep(delay);
    }
  }

  /** @internal */
  async json<T>(call: Call): Promise<T> {
    return (await (await this.send(call)).json()) as T;
  }
}

export class Generations {
  constructor(private readonly client: Vidgate) {}

  /**
   * Submits a job to `endpoint` (`vendor/model/mode`) and resolves to the
   * queued generation; its price is held until it finishes. The request
   * carries an `Idempotency-Key` (`idempotencyKey`, or one generated here),
   * so a retry after a lost answer replays the first generation instead of
   * billing a second.
   */
  async create(endpoint: string, input: Record<string, unknown>, options: CreateOptions = {}): Promise<Generation> {
    const body: Record<string, unknown> = { ...input };
    if (options.webhookUrl !== undefined) body["webhook_url"] = options.webhookUrl;
    const key = options.idempotencyKey ?? `vidgate-typescript-${randomKey()}`;
    return this.client.json<Generation>({
      method: "POST",
      path: `/run/${idPath(endpoint, 3, "endpoint")}`,
      json: body,
      headers: { "Idempotency-Key": key },
    });
  }

  async get(id: string): Promise<Generation> {
    return (await this.getWithHint(id)).generation;
  }

  private async getWithHint(id: string): Promise<{ generation: Generation; hint: number | undefined }> {
    const response = await this.client.send({ method: "GET", path: `/generations/${segment(id)}` });
    const hint = parseRetryAfter(response.headers.get("retry-after"));
    return { generation: (await response.json()) as Generation, hint };
  }

  /** Cancels a queued generation (refunded); a running or finished one rejects with `ConflictError`. */
  async cancel(id: string): Promise<Generation> {
    return this.client.json<Generation>({ method: "POST", path: `/generations/${segment(id)}/cancel` });
  }

  /** One page of recent generations, newest first. */
  async listPage(options: ListOptions & { cursor?: string } = {}): Promise<GenerationPage> {
    const query: Record<string, string> = {};
    if (options.status !== undefined) query["status"] = options.status;
    if (options.model !== undefined) query["model"] = options.model;
    if (options.limit !== undefined) query["limit"] = String(options.limit);
    if (options.cursor !== undefined) query["cursor"] = options.cursor;
    return this.client.json<GenerationPage>({ method: "GET", path: "/generations", query });
  }

  /** Every generation matching the filters, newest first, fetching pages of `limit` as iteration goes. */
  async *list(options: ListOptions = {}): AsyncGenerator<Generation, void, undefined> {
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listPage(cursor === undefined ? options : { ...options, cursor });
      yield* page.data;
      if (!page.has_more || page.next_cursor === null) return;
      cursor = page.next_cursor;
    }
  }

  /**
   * Resolves once the generation is succeeded, failed or canceled. Each read
   * asks the server to answer only when the generation is final or a minute
   * has passed (`Prefer: wait`), so the answer comes the moment it
   * finishes. A server without waits answers at once; then this polls as
   * often as its `Retry-After` asks (5 s by default). Rejects with
   * {@link WaitTimeoutError} after `timeout` ms.
   */
  async wait(id: string, options: WaitOptions = {}): Promise<Generation> {
    const started = Date.now();
    for (;;) {
      const remaining = options.timeout === undefined ? undefined : options.timeout - (Date.now() - started);
      const seconds = remaining === undefined ? MAX_WAIT_SECONDS : Math.max(0, Math.min(MAX_WAIT_SECONDS, Math.floor(remaining / 1000)));
      const call: Call = { method: "GET", path: `/generations/${segment(id)}` };
      if (seconds > 0) {
        call.headers = { Prefer: `wait=${seconds}` };
        call.extraTimeout = seconds * 1000;
      }
      const response = await this.client.send(call);
      const generation = (await response.json()) as Generation;
      if (FINAL_STATUSES.includes(generation.status)) return generation;
      const waited = (response.headers.get("preference-applied") ?? "").trim().startsWith("wait=");
      const delay = waited ? 0 : (parseRetryAfter(response.headers.get("retry-after")) ?? DEFAULT_POLL_INTERVAL_MS);
      if (options.timeout !== undefined && Date.now() - started + delay >= options.timeout) {
        throw new WaitTimeoutError(`Generation ${id} is still ${generation.status} after ${options.timeout} ms`, generation);
      }
      await sleep(delay);
    }
  }

  /**
   * The generation now, then again at each change of its status, ending
   * after its final state, from the server's event stream
   * (`GET /generations/{id}/events`). A stream the server ends early (its
   * shutdown) or that goes silent past the client's timeout is resumed
   * where it stopped. Against a server without event streams, this polls
   * instead and yields each change it sees.
   */
  async *stream(id: string): AsyncGenerator<Generation, void, undefined> {
    let lastEventId: string | undefined;
    for (;;) {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (lastEventId !== undefined) headers["Last-Event-ID"] = lastEventId;
      let response: Response;
      try {
        response = await this.client.send({ method: "GET", path: `/generations/${segment(id)}/events`, headers, streamed: true });
      } catch (error) {
        if (!(error instanceof NotFoundError)) throw error;
        // An unknown generation rejects here; a known one means the server
        // has no event streams.
        await this.get(id);
        yield* this.changesByPolling(id);
        return;
      }
      if (response.status === 204 || response.body === null) return;
      const parser = new EventStreamParser();
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      try {
        for (;;) {
          const chunk = await readWithin(reader, this.client.settings.timeout);
          if (chunk === undefined) break;
          for (const event of parser.push(chunk)) {
            if (event.id !== undefined) lastEventId = event.id;
            const generation = JSON.parse(event.data) as Generation;
            yield generation;
            if (FINAL_STATUSES.includes(generation.status)) return;
          }
        }
      } catch {
        // The connection was lost: resumed below with the last event id.
      } finally {
        reader.cancel().catch(() => undefined);
      }
      await sleep(parser.reconnectDelay);
    }
  }

  /** What `stream` yields, from plain reads: each new status, read as often as `Retry-After` asks. */
  private async *changesByPolling(id: string): AsyncGenerator<Generation, void, undefined> {
    let lastStatus: string | undefined;
    for (;;) {
      const { generation, hint } = await this.getWithHint(id);
      if (generation.status !== lastStatus) {
        yield generation;
        lastStatus = generation.status;
      }
      if (FINAL_STATUSES.includes(generation.status)) return;
      await sleep(hint ?? DEFAULT_POLL_INTERVAL_MS);
    }
  }
}

/** The next text of a stream, or `undefined` at its end or after `timeout` ms of silence. */
async function readWithin(reader: ReadableStreamDefaultReader<string>, timeout: number): Promise<string | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const silence = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), timeout);
  });
  try {
    const read = await Promise.race([reader.read(), silence]);
    return read === undefined || read.done ? undefined : read.value;
  } finally {
    clearTimeout(timer);
  }
}

/** One server-sent event. */
export interface StreamEvent {
  id: string | undefined;
  data: string;
}

/**
 * Reads a `text/event-stream` as its text arrives: `push` returns the events
 * its blank lines completed, and the parser remembers the `retry:` asked for.
 */
export class EventStreamParser {
  reconnectDelay = 1000;
  private buffer = "";
  private eventId: string | undefined;
  private data: string[] = [];

  push(text: string): StreamEvent[] {
    this.buffer += text;
    const events: StreamEvent[] = [];
    for (let end = this.buffer.search(/\r?\n/); end !== -1; end = this.buffer.search(/\r?\n/)) {
      const line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(this.buffer[end] === "\r" ? end + 2 : end + 1);
      if (line === "") {
        if (this.data.length > 0) events.push({ id: this.eventId, data: this.data.join("\n") });
        this.data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") this.eventId = value;
      else if (field === "data") this.data.push(value);
      else if (field === "retry" && /^\d+$/.test(value)) this.reconnectDelay = Number(value);
    }
    return events;
  }
}

export class Models {
  constructor(private readonly client: Vidgate) {}

  /** The catalog: every model with its endpoints and pricing. */
  async list(): Promise<Model[]> {
    return (await this.client.json<{ data: Model[] }>({ method: "GET", path: "/models" })).data;
  }

  /** One model by id, `vendor/model`. */
  async get(id: string): Promise<Model> {
    return this.client.json<Model>({ method: "GET", path: `/models/${idPath(id, 2, "model")}` });
  }
}

async function readFileInput(file: FileInput, filename: string | undefined): Promise<{ name: string; blob: Blob }> {
  if (typeof file === "string") {
    const { readFile } = await import("node:fs/promises");
    const { basename } = await import("node:path");
    const bytes = await readFile(file);
    return { name: filename ?? basename(file), blob: new Blob([bytes]) };
  }
  if (file instanceof Blob) {
    const named = (file as { name?: unknown }).name;
    return { name: filename ?? (typeof named === "string" && named !== "" ? named : "upload"), blob: file };
  }
  // A copy, so the Blob owns a plain ArrayBuffer whatever backs the view.
  return { name: filename ?? "upload", blob: new Blob([file instanceof ArrayBuffer ? file : new Uint8Array(file)]) };
}

function guessMediaType(filename: string): string | undefined {
  const extension = filename.includes(".") ? filename.split(".").pop()!.toLowerCase() : "";
  return UPLOAD_MEDIA_TYPES[extension];
}

export class Uploads {
  private directUnavailable = false;

  constructor(private readonly client: Vidgate) {}

  /**
   * Uploads a file and resolves to an {@link Upload} whose `url` works in
   * any `*_url` request field. By default the bytes go straight to the
   * deployment's bucket through a presigned URL when it offers one, else
   * (501 `direct_upload_unavailable`, remembered by this client) as
   * multipart to vidgate.
   */
  async create(file: FileInput, options: UploadOptions = {}): Promise<Upload> {
    const { name, blob } = await readFileInput(file, options.filename);
    if (options.direct !== false && !this.directUnavailable) {
      const declared = options.contentType ?? guessMediaType(name);
      try {
        const pending = await this.initiate(
          declared === undefined ? { sizeBytes: blob.size } : { contentType: declared, sizeBytes: blob.size },
        );
        // The presigned URL is the credential: no Authorization header goes to the bucket.
        await this.client.send({
          method: pending.method,
          path: pending.upload_url,
          headers: pending.headers,
          bytes: await blob.arrayBuffer(),
        });
        return {
          id: pending.id,
          object: "upload",
          url: pending.url,
          content_type: declared ?? null,
          size_bytes: blob.size,
          media: null,
          created_at: null,
        };
      } catch (error) {
        if (!(error instanceof DirectUploadUnavailableError) || options.direct === true) throw error;
        this.directUnavailable = true;
      }
    }
    const typed = options.contentType !== undefined ? new Blob([blob], { type: options.contentType }) : blob;
    return this.client.json<Upload>({
      method: "POST",
      path: "/uploads",
      // A second upload of the same file only leaves an unused copy.
      resendUnanswered: true,
      form: () => {
        const form = new FormData();
        form.append("file", typed, name);
        return form;
      },
    });
  }

  /**
   * Starts a presigned upload (PUT the bytes to `upload_url` yourself);
   * rejects with `DirectUploadUnavailableError` without object storage.
   */
  async initiate(options: { contentType?: string; sizeBytes?: number } = {}): Promise<DirectUpload> {
    const body: Record<string, unknown> = {};
    if (options.contentType !== undefined) body["content_type"] = options.contentType;
    if (options.sizeBytes !== undefined) body["size_bytes"] = options.sizeBytes;
    return this.client.json<DirectUpload>({ method: "POST", path: "/uploads/initiate", json: body, resendUnanswered: true });
  }
}

export class AccountResource {
  constructor(private readonly client: Vidgate) {}

  /** The caller's account: balance, held money, spend and limits. */
  async get(): Promise<Account> {
    return this.client.json<Account>({ method: "GET", path: "/account" });
  }

  /**
   * Starts a Stripe Checkout that adds `amountUsd` (`"20.00"`) of credit,
   * where the deployment sells credit through Stripe; send the customer to
   * the session's `url`. A retry with the same `idempotencyKey` (one is
   * generated) answers the same session.
   */
  async checkout(amountUsd: string, options: { idempotencyKey?: string } = {}): Promise<CheckoutSession> {
    const key = options.idempotencyKey ?? `vidgate-typescript-${randomKey()}`;
    return this.client.json<CheckoutSession>({
      method: "POST",
      path: "/account/checkout",
      json: { amount_usd: amountUsd },
      headers: { "Idempotency-Key": key },
    });
  }
}

export class Webhooks {
  constructor(private readonly client: Vidgate) {}

  private secret(secret: string | undefined): string {
    const chosen = secret ?? this.client.settings.webhookSecret;
    if (!chosen) throw new TypeError("no webhook secret: pass one or set VIDGATE_WEBHOOK_SECRET");
    return chosen;
  }

  /**
   * Rejects with `WebhookVerificationError` unless the message is signed
   * with `secret` (default: the client's `webhookSecret`) and recent.
   */
  async verify(
    payload: string | Uint8Array | ArrayBuffer,
    headers: webhooks.HeadersLike,
    secret?: string,
    options?: webhooks.VerifyOptions,
  ): Promise<void> {
    await webhooks.verify(payload, headers, this.secret(secret), options);
  }

  /**
   * Verifies the message and resolves to its event, discriminated by `type`:
   * a `WebhookEvent` (a generation's) or an `AccountBalanceLowEvent` (see
   * `webhooks.unwrap` for event types this library does not know).
   */
  async unwrap(
    payload: string | Uint8Array | ArrayBuffer,
    headers: webhooks.HeadersLike,
    secret?: string,
    options?: webhooks.VerifyOptions,
  ): Promise<AnyWebhookEvent> {
    return webhooks.unwrap(payload, headers, this.secret(secret), options);
  }

  /** The generation's webhook deliveries with every attempt. */
  async deliveries(generationId: string): Promise<WebhookDelivery[]> {
    const path = `/generations/${segment(generationId)}/webhook-deliveries`;
    return (await this.client.json<{ data: WebhookDelivery[] }>({ method: "GET", path })).data;
  }

  /** Sends a delivery again now. */
  async retryDelivery(generationId: string, deliveryId: string): Promise<WebhookDelivery> {
    const path = `/generations/${segment(generationId)}/webhook-deliveries/${segment(deliveryId)}/retry`;
    return this.client.json<WebhookDelivery>({ method: "POST", path });
  }

  /** A new signing secret, returned once; the old one signs for 24 h more. */
  async rotateSecret(): Promise<WebhookSecret> {
    return this.client.json<WebhookSecret>({ method: "POST", path: "/account/webhook-secret/rotate" });
  }
}

