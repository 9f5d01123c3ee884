/**
 * Records of the API's resources, as the API sends them (JSON field names,
 * timestamps as RFC 3339 strings, money in US dollars).
 */

/** The values of `Generation.status`, and of the `status` filter of a list. */
export type GenerationStatus = "queued" | "running" | "succeeded" | "failed" | "canceled";
export type Mode = "text-to-video" | "image-to-video" | "reference-to-video";
export type WebhookEventType = "generation.succeeded" | "generation.failed" | "generation.canceled";

/** The statuses after which a generation never changes again. */
export const FINAL_STATUSES: readonly GenerationStatus[] = ["succeeded", "failed", "canceled"];

/** What a generation costs: the held estimate until it succeeds, then the captured price; 0 once failed or canceled. */
export interface Cost {
  amount_usd: number;
  currency: "usd";
  estimated: boolean;
  official_usd: number | null;
  saved_usd: number | null;
}

/** The finished clip; `video_url` plays in a browser and supports Range until the server's retention time passes (then `expired`). */
export interface GenerationOutput {
  video_url: string;
  content_type?: string;
  duration_s?: number;
  width?: number;
  height?: number;
  fps?: number;
  has_audio?: boolean;
  size_bytes?: number;
  seed?: number;
  /** Present once the server's retention time passed: the clip was deleted and `video_url` answers 410 gone. */
  expired?: true;
  /** When the clip expired (RFC 3339); present with `expired`. */
  expired_at?: string;
}

/** Why an accepted generation failed (its hold was refunded). */
export interface GenerationError {
  code: string;
  message: string;
}

export interface GenerationUrls {
  get: string;
  cancel: string;
}

/** One generation job (SPEC.md section 2). */
export interface Generation {
  id: string;
  object: "generation";
  model: string;
  endpoint: string;
  mode: Mode;
  status: GenerationStatus;
  input: Record<string, unknown>;
  output: GenerationOutput | null;
  error: GenerationError | null;
  cost: Cost;
  source: string;
  started_at: string | null;
  completed_at: string | null;
  urls: GenerationUrls;
  created_at: string;
}

/** One page of `GET /generations`; `generations.list` walks them all. */
export interface GenerationPage {
  object: "list";
  data: Generation[];
  has_more: boolean;
  next_cursor: string | null;
}

export interface AccountLimits {
  requests_per_second: number;
  burst: number;
  max_concurrent_generations: number;
}

/** The caller's account: balance, held and spent money, limits. */
export interface Account {
  id: string;
  object: "account";
  name?: string;
  balance_usd: number;
  held_usd: number;
  spent_usd?: number;
  credited_usd?: number;
  limits: AccountLimits;
}

/** A price without running: `cost` is what a submit would hold. */
export interface Quote {
  object: "quote";
  endpoint: string;
  model: string;
  mode: Mode;
  input: Record<string, unknown>;
  cost: Cost;
  breakdown: Record<string, unknown>;
}

/** One mode of a model: where to submit and quote, and its input's JSON Schema. */
export interface ModelEndpoint {
  id: string;
  mode: Mode;
  url: string;
  quote_url: string;
  input_schema: Record<string, unknown>;
}

/** A model of the catalog, with its endpoints and pricing. */
export interface Model {
  id: string;
  object?: "model";
  label: string;
  name?: string;
  description?: string;
  description_version?: string;
  modes: Mode[];
  endpoints: ModelEndpoint[];
  reference_media?: Record<string, unknown>;
  pricing?: Record<string, unknown>;
}

/** What the server found in an uploaded file. */
export interface UploadMedia {
  format: "jpg" | "png" | "webp" | "mp4" | "mov" | "mp3" | "wav";
  width?: number;
  height?: number;
  duration_s?: number;
  fps?: number;
}

/**
 * An uploaded file: use `url` in any `*_url` field of a request. After a
 * presigned (direct) upload the file is not probed yet: `media` and
 * `created_at` are null and `content_type` is the declared one.
 */
export interface Upload {
  id: string;
  object: "upload";
  url: string;
  content_type: string | null;
  size_bytes: number;
  media: UploadMedia | null;
  created_at: string | null;
}

/** A pending presigned upload: PUT the bytes to `upload_url` with `headers` before `expires_at`. */
export interface DirectUpload {
  id: string;
  object: "upload";
  upload_url: string;
  method: "PUT";
  headers: Record<string, string>;
  url: string;
  expires_at: string;
}

/** One attempt of a webhook delivery. */
export interface WebhookAttempt {
  attempt?: number;
  started_at?: string;
  duration_ms?: number;
  status_code?: number | null;
  error?: string | null;
  response_body?: string | null;
  next_attempt_at?: string | null;
}

/** A webhook delivery with every attempt; `id` is the `webhook-id` header. */
export interface WebhookDelivery {
  id: string;
  object: "webhook_delivery";
  generation_id: string;
  event_type: WebhookEventType;
  url: string;
  status: string;
  in_flight?: boolean;
  attempt_count: number;
  next_attempt_at?: string | null;
  created_at: string;
  completed_at?: string | null;
  attempts: WebhookAttempt[];
}

/** A Stripe Checkout started to add credit: send the customer to `url`; the credit arrives once Stripe reports the payment. */
export interface CheckoutSession {
  id: string;
  object: "checkout_session";
  url: string;
}

/** A new signing secret, shown once; the previous one signs until `previous_secret_expires_at`. */
export interface WebhookSecret {
  object: "webhook_secret";
  webhook_secret: string;
  previous_secret_expires_at: string | null;
}

/**
 * A verified webhook body about a generation (`generation.succeeded`,
 * `generation.failed`, `generation.canceled`): the event, when it happened,
 * and the generation as `get` returns it.
 */
export interface WebhookEvent {
  type: WebhookEventType;
  timestamp: string;
  data: Generation;
}

/**
 * The `data` of `account.balance_low`: the account, its balance as
 * `account.get` shows it (negative while it owes a debt) and the threshold
 * it fell below, in US dollars, as they were when the balance crossed it.
 */
export interface BalanceAlert {
  object: "balance_alert";
  account_id: string;
  balance_usd: number;
  threshold_usd: number;
}

/**
 * A verified `account.balance_low` body: sent once each time the account's
 * balance falls below its low-balance threshold; `timestamp` is when it did.
 */
export interface AccountBalanceLowEvent {
  type: "account.balance_low";
  timestamp: string;
  data: BalanceAlert;
}

/**
 * What `webhooks.unwrap` resolves to, discriminated by `type`: narrow with
 * `event.type === "account.balance_low"` or a `switch`. The events of a type
 * added to the server after this version of the library are not refused but
 * resolve to their JSON as it is (see {@link UnknownWebhookEvent}), which is
 * none of these: keep a `default` branch that answers 2xx.
 */
export type AnyWebhookEvent = WebhookEvent | AccountBalanceLowEvent;

/**
 * The shape of an event whose `type` this version of the library does not
 * know, as `unwrap` returns it (its JSON, unchecked beyond a string `type`).
 * It is not part of {@link AnyWebhookEvent}, so that `type` narrows the known
 * kinds; in the `default` branch of a `switch (event.type)`, read it with
 * `event as UnknownWebhookEvent`.
 */
export interface UnknownWebhookEvent {
  type: string;
  timestamp: string;
  data: Record<string, unknown>;
}
