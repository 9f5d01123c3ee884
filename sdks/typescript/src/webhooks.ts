/**
 * Checking webhooks: the Standard Webhooks signature vidgate sends, with Web
 * Crypto only (Node 18+, Deno, browsers, edge runtimes).
 *
 * vidgate signs each attempt with HMAC-SHA256 over
 * `{webhook-id}.{webhook-timestamp}.{body}`, keyed with the base64 part of
 * the account's `whsec_…` secret, and sends `v1,<base64>` in
 * `webhook-signature` (two, space-separated, for 24 hours after a
 * rotation). Pass the raw body, not JSON parsed and serialised again.
 *
 * `unwrap` resolves to the event, discriminated by `type`: a `WebhookEvent`
 * for `generation.succeeded`, `generation.failed` and `generation.canceled`,
 * an `AccountBalanceLowEvent` for `account.balance_low`. As Stripe's and
 * Svix's libraries do, an event of a type added to the server after this
 * library is not refused: it resolves to its JSON as it is (an
 * `UnknownWebhookEvent`), so that a receiver can answer 2xx to what it does
 * not handle (any other answer is retried for a day).
 */

import { WebhookVerificationError } from "./errors.js";
import type { AnyWebhookEvent } from "./types.js";

/** How far `webhook-timestamp` may be from now, either way, in seconds (older may be a replay). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/** Headers as a `Headers` object, or a plain object as Node and frameworks give them. */
export type HeadersLike =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

export interface VerifyOptions {
  /** Seconds `webhook-timestamp` may be from now (default 300). */
  tolerance?: number;
  /** The current time in Unix seconds (default: the clock), for tests. */
  now?: number;
}

const encoder = new TextEncoder();

async function subtle(): Promise<SubtleCrypto> {
  const global = (globalThis as { crypto?: Crypto }).crypto;
  if (global?.subtle !== undefined) return global.subtle;
  // Node 18 puts Web Crypto on the global object only behind a flag.
  const nodeCrypto = (await import("node:crypto")) as unknown as { webcrypto: Crypto };
  return nodeCrypto.webcrypto.subtle;
}

function header(headers: HeadersLike, name: string): string {
  let value: string | string[] | null | undefined;
  if (typeof (headers as { get?: unknown }).get === "function") {
    value = (headers as { get(name: string): string | null }).get(name);
  } else {
    const record = headers as Record<string, string | string[] | undefined>;
    const key = Object.keys(record).find((candidate) => candidate.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  if (Array.isArray(value)) value = value.join(" ");
  if (value === null || value === undefined) {
    throw new WebhookVerificationError(`The ${name} header is missing.`);
  }
  return value;
}

function base64ToBytes(text: string): Uint8Array<ArrayBuffer> {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) {
    throw new WebhookVerificationError("The webhook secret is not a whsec_… secret (base64 after the prefix).");
  }
  const binary = atob(text);
  return Uint8Array.from(binary, (character) => character.charCodeAt(0));
}

function bytesToBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

function bodyBytes(payload: string | Uint8Array | ArrayBuffer): Uint8Array {
  if (typeof payload === "string") return encoder.encode(payload);
  return payload instanceof Uint8Array ? payload : new Uint8Array(payload);
}

/** The `webhook-signature` value vidgate sends for a message (for a receiver's own tests). */
export async function sign(
  payload: string | Uint8Array | ArrayBuffer,
  secret: string,
  messageId: string,
  timestamp: number,
): Promise<string> {
  const encoded = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const crypto = await subtle();
  const key = await crypto.importKey("raw", base64ToBytes(encoded), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const prefix = encoder.encode(`${messageId}.${timestamp}.`);
  const body = bodyBytes(payload);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  const digest = new Uint8Array(await crypto.sign("HMAC", key, signed));
  return `v1,${bytesToBase64(digest)}`;
}

/** Compares without stopping at the first difference, so timing tells nothing. */
function constantTimeEqual(left: string, right: string): boolean {
  if (left.length !== right.length) return false;
  let difference = 0;
  for (let index = 0; index < left.length; index++) difference |= left.charCodeAt(index) ^ right.charCodeAt(index);
  return difference === 0;
}

/**
 * Rejects with {@link WebhookVerificationError} unless one of the message's
 * signatures is `secret`'s and its timestamp is within `tolerance` seconds of now.
 */
export async function verify(
  payload: string | Uint8Array | ArrayBuffer,
  headers: HeadersLike,
  secret: string,
  options: VerifyOptions = {},
): Promise<void> {
  const messageId = header(headers, "webhook-id");
  const timestampText = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  const timestamp = Number(timestampText);
  if (!/^\d+$/.test(timestampText) || !Number.isSafeInteger(timestamp)) {
    throw new WebhookVerificationError("The webhook-timestamp header is not a number.");
  }
  const now = options.now ?? Date.now() / 1000;
  if (Math.abs(now - timestamp) > (options.tolerance ?? DEFAULT_TOLERANCE_SECONDS)) {
    throw new WebhookVerificationError("The webhook-timestamp is too far from now: an old message may be a replay.");
  }
  const expected = (await sign(payload, secret, messageId, timestamp)).slice("v1,".length);
  for (const candidate of signatures.split(" ")) {
    const [version, digest] = candidate.split(",", 2);
    if (version === "v1" && digest !== undefined && constantTimeEqual(digest, expected)) return;
  }
  throw new WebhookVerificationError("No signature of the message matches the secret.");
}

/** Whether `value` is the `data` of `account.balance_low` as the server signs it. */
function isBalanceAlert(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const alert = value as Record<string, unknown>;
  return (
    typeof alert["account_id"] === "string" &&
    typeof alert["balance_usd"] === "number" &&
    typeof alert["threshold_usd"] === "number"
  );
}

/**
 * Verifies the message (see {@link verify}) and returns its event, by its
 * `type`: a `WebhookEvent` (a generation's) or an `AccountBalanceLowEvent`;
 * an event of a type this library does not know resolves to its JSON (an
 * `UnknownWebhookEvent`). Rejects with {@link WebhookVerificationError} when
 * the message is not signed with `secret`, or its body is not a vidgate event.
 */
export async function unwrap(
  payload: string | Uint8Array | ArrayBuffer,
  headers: HeadersLike,
  secret: string,
  options: VerifyOptions = {},
): Promise<AnyWebhookEvent> {
  await verify(payload, headers, secret, options);
  const text = typeof payload === "string" ? payload : new TextDecoder().decode(bodyBytes(payload));
  let event: unknown;
  try {
    event = JSON.parse(text);
  } catch {
    throw new WebhookVerificationError("The signed body is not JSON.");
  }
  if (typeof event !== "object" || event === null || typeof (event as { type?: unknown }).type !== "string") {
    throw new WebhookVerificationError("The signed body is not a vidgate event.");
  }
  const { type, data } = event as { type: string; data?: unknown };
  if (type === "account.balance_low" && !isBalanceAlert(data)) {
    throw new WebhookVerificationError("The signed body is not a vidgate event.");
  }
  return event as AnyWebhookEvent;
}
