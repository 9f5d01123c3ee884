// The library against the server's OpenAPI document: every customer
// operation (under /api/v1, not the operator API, health or model-server
// callbacks) must be one the library calls, with every query parameter,
// body field, response field and error code it documents known here.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ERROR_CLASSES, Vidgate } from "../src/index.js";
import type * as types from "../src/index.js";
import { OPERATIONS, type Operation } from "../src/operations.js";
import { sharedWorld, stopSharedWorld, type World } from "./harness.js";

/** The fields of a record type, checked by the compiler: every key of T, and no other. */
function fields<T>(record: { [K in keyof Required<T>]: true }): string[] {
  return Object.keys(record);
}

// The library's record for each documented object: component schemas by
// name, inline objects as Parent.field (Parent.field[] for array items).
const RECORDS: Record<string, string[]> = {
  Generation: fields<types.Generation>({ id: true, object: true, model: true, endpoint: true, mode: true, status: true, input: true, output: true, error: true, cost: true, source: true, started_at: true, completed_at: true, urls: true, created_at: true }),
  "Generation.urls": fields<types.GenerationUrls>({ get: true, cancel: true }),
  GenerationOutput: fields<types.GenerationOutput>({ video_url: true, content_type: true, duration_s: true, width: true, height: true, fps: true, has_audio: true, size_bytes: true, seed: true, expired: true, expired_at: true }),
  GenerationError: fields<types.GenerationError>({ code: true, message: true }),
  Cost: fields<types.Cost>({ amount_usd: true, currency: true, estimated: true, official_usd: true, saved_usd: true }),
  GenerationList: fields<types.GenerationPage>({ object: true, data: true, has_more: true, next_cursor: true }),
  Account: fields<types.Account>({ id: true, object: true, name: true, balance_usd: true, held_usd: true, spent_usd: true, credited_usd: true, limits: true }),
  "Account.limits": fields<types.AccountLimits>({ requests_per_second: true, burst: true, max_concurrent_generations: true }),
  Quote: fields<types.Quote>({ object: true, endpoint: true, model: true, mode: true, input: true, cost: true, breakdown: true }),
  Model: fields<types.Model>({ id: true, object: true, label: true, name: true, description: true, description_version: true, modes: true, endpoints: true, reference_media: true, pricing: true }),
  WebhookDelivery: fields<types.WebhookDelivery>({ id: true, object: true, generation_id: true, event_type: true, url: true, status: true, in_flight: true, attempt_count: true, next_attempt_at: true, created_at: true, completed_at: true, attempts: true }),
  "WebhookDelivery.attempts[]": fields<types.WebhookAttempt>({ attempt: true, started_at: true, duration_ms: true, status_code: true, error: true, response_body: true, next_attempt_at: true }),
  WebhookSecret: fields<types.WebhookSecret>({ object: true, webhook_secret: true, previous_secret_expires_at: true }),
  CheckoutSession: fields<types.CheckoutSession>({ id: true, object: true, url: true }),
  Upload: fields<types.Upload>({ id: true, object: true, url: true, content_type: true, size_bytes: true, media: true, created_at: true }),
  "Upload.media": fields<types.UploadMedia>({ format: true, width: true, height: true, duration_s: true, fps: true }),
  DirectUpload: fields<types.DirectUpload>({ id: true, object: true, upload_url: true, method: true, headers: true, url: true, expires_at: true }),
  // Lists the library returns as arrays: only their envelopes.
  ModelList: ["object", "data"],
  WebhookDeliveryList: ["object", "data"],
};

const HTTP_METHODS = new Set(["get", "put", "post", "delete", "patch", "head", "options"]);
/** Tags of operations that are not the customer API. */
const NON_CUSTOMER_TAGS = new Set(["admin", "operator", "operators", "internal", "health", "cog", "callbacks"]);
/**
 * Tags of other vendors' APIs the server speaks for their own clients
 * (docs/dialects.md): OpenAI's at /v1, OpenRouter's inside /api/v1. Their
 * shapes are those vendors', not this library's.
 */
const DIALECT_TAGS = new Set(["openai-videos", "openrouter-videos"]);
const CUSTOMER_SECURITY = new Set(["bearer"]);
/** Probes for load balancers and monitoring, wherever they are documented. */
const PROBE_PATH = /\/(health|healthz|ready|readyz|live|livez|metrics)$/;

type Schema = Record<string, unknown> & { $ref?: string; properties?: Record<string, Schema>; items?: Schema };
interface Document {
  servers?: { url: string }[];
  security?: Record<string, string[]>[];
  paths: Record<string, Record<string, Record<string, unknown>>>;
  components: { schemas: Record<string, Schema> };
}

function* customerOperations(document: Document): Generator<[string, Record<string, unknown>]> {
  for (const [path, item] of Object.entries(document.paths)) {
    // A path's own servers replace the document's (OpenAPI 3.1, 4.8.9).
    const servers = (item["servers"] as unknown as { url: string }[] | undefined) ?? document.servers;
    const prefix = new URL(servers?.[0]?.url ?? "http://x").pathname.replace(/\/$/, "");
    const full = path.startsWith("/api/") ? path : prefix + path;
    if (!full.startsWith("/api/v1/")) continue;
    const relative = full.slice("/api/v1".length).replace(/\{[^}]*\}/g, "{}");
    if (PROBE_PATH.test(relative)) continue;
    for (const [method, operation] of Object.entries(item)) {
      if (!HTTP_METHODS.has(method)) continue;
      const tags = (operation["tags"] as string[] | undefined) ?? [];
      if (tags.some((tag) => NON_CUSTOMER_TAGS.has(tag) || DIALECT_TAGS.has(tag))) continue;
      const security = (operation["security"] as Record<string, string[]>[] | undefined) ?? document.security ?? [];
      if (security.some((requirement) => Object.keys(requirement).some((name) => !CUSTOMER_SECURITY.has(name)))) continue;
      yield [`${method.toUpperCase()} ${relative}`, operation];
    }
  }
}

function knownOperation(key: string): [string, Operation] | undefined {
  const exact = OPERATIONS[key];
  if (exact !== undefined) return [key, exact];
  for (const [pattern, operation] of Object.entries(OPERATIONS)) {
    if (pattern.endsWith("*") && key.startsWith(pattern.slice(0, -1)) && !key.includes("{}")) return [pattern, operation];
  }
  return undefined;
}

function resolve(document: Document, schema: Schema): [string | undefined, Schema] {
  if (schema.$ref === undefined) return [undefined, schema];
  const name = schema.$ref.split("/").pop()!;
  return [name, document.components.schemas[name]!];
}

function objectsIn(document: Document, given: Schema, givenName: string | undefined, found: Map<string, string[]>): void {
  const [referenced, schema] = resolve(document, given);
  const name = referenced ?? givenName;
  for (const key of ["oneOf", "anyOf", "allOf"]) {
    for (const variant of (schema[key] as Schema[] | undefined) ?? []) objectsIn(document, variant, name, found);
  }
  if (schema.properties !== undefined && name !== undefined) {
    if (found.has(name)) return;
    found.set(name, Object.keys(schema.properties));
    for (const [field, property] of Object.entries(schema.properties)) objectsIn(document, property, `${name}.${field}`, found);
  }
  if (schema.items !== undefined && typeof schema.items === "object") objectsIn(document, schema.items, `${name}[]`, found);
}

function operationProblems(document: Document): string[] {
  const keys = [...customerOperations(document)].map(([key]) => key);
  const problems = keys.filter((key) => knownOperation(key) === undefined).map((key) => `${key}: an operation the library does not know`);
  const covered = new Set(keys.map((key) => knownOperation(key)?.[0]));
  return problems.concat(Object.keys(OPERATIONS).filter((key) => !covered.has(key)).map((key) => `${key}: gone from the API`));
}

function parameterProblems(document: Document): string[] {
  const problems: string[] = [];
  for (const [key, operation] of customerOperations(document)) {
    const known = knownOperation(key)?.[1];
    if (known === undefined) continue;
    for (const parameter of (operation["parameters"] as { in: string; name: string }[] | undefined) ?? []) {
      if (parameter.in === "query" && !(known.query ?? []).includes(parameter.name)) problems.push(`${key}: query parameter ${parameter.name}`);
    }
    if ((known.body ?? []).includes("*")) continue;
    const content = (operation["requestBody"] as { content?: Record<string, { schema?: Schema }> } | undefined)?.content ?? {};
    for (const media of Object.values(content)) {
      const [, schema] = resolve(document, media.schema ?? {});
      for (const field of Object.keys(schema.properties ?? {})) {
        if (!(known.body ?? []).includes(field)) problems.push(`${key}: body field ${field}`);
      }
    }
  }
  return problems;
}

function fieldProblems(document: Document): string[] {
  const found = new Map<string, string[]>();
  for (const [, operation] of customerOperations(document)) {
    const responses = (operation["responses"] as Record<string, { content?: Record<string, { schema?: Schema }> }> | undefined) ?? {};
    for (const [status, response] of Object.entries(responses)) {
      if (!status.startsWith("2")) continue;
      for (const media of Object.values(response.content ?? {})) objectsIn(document, media.schema ?? {}, undefined, found);
    }
  }
  const problems: string[] = [];
  if (!found.has("Generation") || !found.has("Generation.urls")) problems.push("the Generation record was not found in any response");
  for (const name of [...found.keys()].sort()) {
    const known = RECORDS[name];
    if (known === undefined) {
      problems.push(`${name}: an object the library has no type for`);
      continue;
    }
    for (const field of [...found.get(name)!].sort()) {
      if (!known.includes(field)) problems.push(`${name}.${field}: a field the library does not know`);
    }
  }
  return problems;
}

function errorProblems(document: Document): string[] {
  const error = document.components.schemas["Error"]!.properties!["error"]!;
  const problems = Object.keys(error.properties!).filter((field) => !["code", "message", "param"].includes(field)).map((field) => `error.${field}: unknown`);
  const codes = (error.properties!["code"] as { enum: string[] }).enum;
  return problems.concat(codes.filter((code) => !(code in ERROR_CLASSES)).sort().map((code) => `${code}: no error class`));
}

function allProblems(document: Document): string[] {
  return [...operationProblems(document), ...parameterProblems(document), ...fieldProblems(document), ...errorProblems(document)];
}

let world: World;
let document: Document;
before(async () => {
  world = await sharedWorld();
  document = (await new Vidgate({ apiKey: "", baseUrl: world.proxy.baseUrl }).openapi()) as unknown as Document;
});
after(async () => {
  await stopSharedWorld();
});

test("the library knows every customer operation, parameter, field and error code", () => {
  assert.deepEqual(allProblems(document), []);
});

test("every listed method exists on the client", () => {
  const client = new Vidgate({ apiKey: "x" });
  for (const { method } of Object.values(OPERATIONS)) {
    let target: unknown = client;
    for (const part of method.split(".")) target = (target as Record<string, unknown>)[part];
    assert.equal(typeof target, "function", method);
  }
});

test("the check fails on what the library does not know", () => {
  const changed = structuredClone(document) as Document & { paths: Record<string, any> };
  const schemas = changed.components.schemas as Record<string, any>;
  changed.paths["/usage"] = { get: { tags: ["account"], responses: { "200": { content: { "application/json": { schema: { $ref: "#/components/schemas/Usage" } } } } } } };
  schemas["Usage"] = { type: "object", properties: { seconds: { type: "integer" } } };
  schemas["Generation"].properties.priority = { type: "integer" };
  schemas["Generation"].properties.urls.properties.stream = { type: "string" };
  changed.paths["/generations"].get.parameters.push({ name: "since", in: "query" });
  schemas["Error"].properties.error.properties.code.enum.push("quota_exceeded");
  delete changed.paths["/account"];
  assert.deepEqual(allProblems(changed), [
    "GET /usage: an operation the library does not know",
    "GET /account: gone from the API",
    "GET /generations: query parameter since",
    "Generation.priority: a field the library does not know",
    "Generation.urls.stream: a field the library does not know",
    "Usage: an object the library has no type for",
    "quota_exceeded: no error class",
  ]);
});

test("the operator API, health and callbacks are not customer operations", () => {
  const changed = structuredClone(document) as Document & { paths: Record<string, any>; components: Record<string, any> };
  changed.components["securitySchemes"].operator = { type: "http", scheme: "bearer" };
  const respond = { "200": { content: { "application/json": { schema: { type: "object", properties: { anything: { type: "string" } } } } } } };
  // Beside the customer API, paths relative to the /api/v1 server: other tags or security schemes.
  changed.paths["/admin/accounts"] = { post: { tags: ["admin"], responses: respond } };
  changed.paths["/operator/keys"] = { get: { security: [{ operator: [] }], responses: respond } };
  changed.paths["/health"] = { get: { tags: ["health"], security: [], responses: respond } };
  changed.paths["/readyz"] = { get: { security: [], responses: respond } };
  // Another vendor's API inside /api/v1, and one with its own server.
  const origin = changed.servers![0]!.url.replace(/\/api\/v1$/, "");
  changed.paths["/videos/jobs"] = { post: { tags: ["openrouter-videos"], responses: respond } };
  changed.paths["/v1/clips"] = { servers: [{ url: origin }], get: { responses: respond } };
  assert.deepEqual(allProblems(changed), []);
  // And a document rooted at the origin, every path absolute.
  const rooted = structuredClone(changed);
  rooted.servers = [{ url: origin }];
  rooted.paths = Object.fromEntries(
    Object.entries(rooted.paths).map(([path, item]) => ["servers" in item ? path : `/api/v1${path}`, item]),
  );
  rooted.paths["/admin/v1/accounts"] = { get: { responses: respond } };
  rooted.paths["/healthz"] = { get: { security: [], responses: respond } };
  rooted.paths["/internal/cog/{generation_id}"] = { post: { security: [], responses: respond } };
  assert.deepEqual(allProblems(rooted), []);
  assert.equal([...customerOperations(rooted)].length, [...customerOperations(document)].length);
});
