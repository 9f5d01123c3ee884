/**
 * Test doubles and helpers: a real `vidgate serve` on port 0 with a fresh
 * data dir, a fault-injecting proxy in front of it (node:http), a webhook
 * receiver, and the admin CLI to make accounts. Not part of the library.
 */

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, openSync, closeSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingMessage, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, beforeEach } from "node:test";
import { deflateSync, crc32 } from "node:zlib";
import { Vidgate, type ClientOptions } from "../src/index.js";

// build/test/harness.js → the repository root is four levels up.
const REPO = resolve(fileURLToPath(import.meta.url), "../../../../..");

/** Cheap and quick: 2 s of 480p without audio costs $0.10 and renders in about a second. */
export const ENDPOINT = "vendor_1/model_1/text-to-video";
export const SMALL = { duration: 2, resolution: "480p", generate_audio: false } as const;

export interface Account {
  account_id: string;
  api_key: string;
  webhook_secret: string;
}

function vidgateBinary(): string {
  const binary = process.env["VIDGATE_BIN"] ?? join(REPO, "target", "debug", "vidgate");
  if (!existsSync(binary)) throw new Error(`no vidgate binary at ${binary}: run cargo build -p vidgate or set VIDGATE_BIN`);
  return binary;
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/**
 * `vidgate serve --simulation --allow-private-network` on a free port; on
 * PostgreSQL when `VIDGATE_SDK_DATABASE_URL` names a fresh database.
 */
export class Server {
  private constructor(
    readonly binary: string,
    readonly dataDir: string,
    readonly storeArgs: string[],
    readonly process: ChildProcess,
    readonly apiBase: string,
  ) {}

  static async start(storage?: Moto): Promise<Server> {
    const binary = vidgateBinary();
    const dataDir = mkdtempSync(join(tmpdir(), "vidgate-sdk-ts-"));
    const storeArgs = ["--data-dir", dataDir];
    // A server with its own storage gets its own (SQLite) database: on a
    // shared one, the other server's workers would claim its jobs and fail
    // to read media from storage they do not have.
    const databaseUrl = storage ? undefined : process.env["VIDGATE_SDK_DATABASE_URL"];
    if (databaseUrl) storeArgs.push("--database-url", databaseUrl);
    const logPath = join(dataDir, "serve.log");
    const log = openSync(logPath, "w");
    const child = spawn(
      binary,
      [
        "serve", "--listen", "127.0.0.1:0", ...storeArgs, "--workers", "2", "--simulation", "--allow-private-network",
        // The suites call the public endpoints far more often than one
        // person would; the fair-use limit is not under test here.
        "--public-rate-limit", "1000", "--public-burst", "1000",
        ...(storage ? ["--storage", storage.storageUrl] : []),
      ],
      { stdio: ["ignore", log, log], env: { ...process.env, ...storage?.environment, NO_COLOR: "1" } },
    );
    closeSync(log);
    for (let tries = 0; tries < 600; tries++) {
      const text = readFileSync(logPath, "utf8");
      const match = /^vidgate API base: (\S+)$/m.exec(text);
      if (match?.[1] !== undefined) return new Server(binary, dataDir, storeArgs, child, match[1]);
      if (child.exitCode !== null) throw new Error(`vidgate serve exited:\n${text}`);
      await sleep(100);
    }
    throw new Error(`vidgate serve did not listen within 60 s:\n${readFileSync(logPath, "utf8")}`);
  }

  admin(...args: string[]): Record<string, unknown> {
    const output = execFileSync(this.binary, ["admin", ...this.storeArgs, ...args], { encoding: "utf8" });
    return JSON.parse(output) as Record<string, unknown>;
  }

  /** A new account with generous limits, so tests do not trip over each other unless they mean to. */
  account(name: string, options: { creditUsd?: string; rps?: number; burst?: number; concurrency?: number } = {}): Account {
    const created = this.admin("account", "create", "--name", name, "--credit-usd", options.creditUsd ?? "100");
    const id = String(created["account_id"]);
    this.admin(
      "account", "limits", id,
      "--rps", String(options.rps ?? 1000),
      "--burst", String(options.burst ?? 1000),
      "--concurrency", String(options.concurrency ?? 100),
    );
    return { account_id: id, api_key: String(created["api_key"]), webhook_secret: String(created["webhook_secret"]) };
  }

  async stop(): Promise<void> {
    const exited = new Promise((done) => this.process.once("exit", done));
    this.process.kill("SIGTERM");
    await Promise.race([exited, sleep(20_000)]);
    if (this.process.exitCode === null) this.process.kill("SIGKILL");
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** moto's S3 server (`VIDGATE_TEST_MOTO_SERVER`) on a free port with one bucket. */
export class Moto {
  readonly storageUrl = "s3://vidgate-sdk/sdk-tests";
  private constructor(readonly process: ChildProcess, readonly endpoint: string) {}

  get environment(): Record<string, string> {
    return {
      AWS_ACCESS_KEY_ID: "test",
      AWS_SECRET_ACCESS_KEY: "test",
      AWS_REGION: "us-east-1",
      AWS_ENDPOINT_URL: this.endpoint,
      AWS_ALLOW_HTTP: "true",
    };
  }

  static async start(program: string): Promise<Moto> {
    const probe = createServer();
    await new Promise<void>((done) => probe.listen(0, "127.0.0.1", done));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((done) => probe.close(done));
    const child = spawn(program, ["-H", "127.0.0.1", "-p", String(port)], { stdio: "ignore" });
    const endpoint = `http://127.0.0.1:${port}`;
    // moto checks no credentials, so a plain PUT creates the bucket.
    for (let tries = 0; tries < 300; tries++) {
      const created = await fetch(`${endpoint}/vidgate-sdk`, { method: "PUT" }).catch(() => undefined);
      if (created?.ok) return new Moto(child, endpoint);
      await sleep(200);
    }
    child.kill();
    throw new Error("moto_server never answered");
  }

  stop(): void {
    this.process.kill();
  }
}

/**
 * Answers the next `count` requests whose method and path match with
 * `status`, or with no answer at all (the connection destroyed) when
 * `status` is 0; after forwarding them when `forwardFirst` (the server
 * acts, the client never hears its answer, as when a response is lost).
 */
export interface Fault {
  method: string;
  pathPrefix: string;
  status: number;
  count: number;
  headers?: Record<string, string>;
  forwardFirst?: boolean;
}

export interface SeenRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  status: number;
  injected: boolean;
}

const HOP_BY_HOP = new Set([
  "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
  "transfer-encoding", "upgrade", "content-length", "host",
]);

const CODES: Record<number, string> = { 404: "not_found", 429: "rate_limited", 500: "internal_error", 502: "upstream_error", 503: "model_unavailable" };

function readBody(message: IncomingMessage): Promise<Buffer> {
  return new Promise((done, fail) => {
    const chunks: Buffer[] = [];
    message.on("data", (chunk: Buffer) => chunks.push(chunk));
    message.on("end", () => done(Buffer.concat(chunks)));
    message.on("error", fail);
  });
}

function headersOf(message: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(message.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  return headers;
}

/**
 * A tiny proxy in front of the server that records every request, injects
 * faults on demand, and shortens the polling hint (`Retry-After: 5` on an
 * unfinished generation) to one second so waits in tests stay short.
 */
export class Proxy {
  faults: Fault[] = [];
  seen: SeenRequest[] = [];
  /** Request headers not passed on (lower case): dropping `prefer` makes the server look like one without waits. */
  stripRequestHeaders = new Set<string>();
  private constructor(
    private readonly server: HttpServer,
    readonly baseUrl: string,
    private readonly upstream: URL,
  ) {}

  static async start(upstreamBase: string): Promise<Proxy> {
    const upstream = new URL(upstreamBase);
    let proxy: Proxy | undefined;
    const server = createServer((request, response) => {
      void proxy!.serve(request, response);
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    const port = (server.address() as AddressInfo).port;
    proxy = new Proxy(server, `http://127.0.0.1:${port}${upstream.pathname.replace(/\/$/, "")}`, upstream);
    return proxy;
  }

  get prefix(): string {
    return this.upstream.pathname.replace(/\/$/, "");
  }

  inject(fault: Fault): void {
    this.faults.push(fault);
  }

  clear(): void {
    this.faults = [];
    this.seen = [];
  }

  requestsTo(method: string, pathPrefix: string): SeenRequest[] {
    return this.seen.filter((seen) => seen.method === method && seen.path.startsWith(this.prefix + pathPrefix));
  }

  private takeFault(method: string, path: string): Fault | undefined {
    const fault = this.faults.find((f) => f.method === method && path.startsWith(this.prefix + f.pathPrefix));
    if (fault !== undefined && --fault.count <= 0) this.faults.splice(this.faults.indexOf(fault), 1);
    return fault;
  }

  private forward(
    method: string,
    path: string,
    headers: Record<string, string>,
    body: Buffer,
  ): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
    return new Promise((done, fail) => {
      const outgoing = httpRequest(
        { host: this.upstream.hostname, port: this.upstream.port, method, path, headers: { ...headers, "content-length": String(body.length) } },
        (answer) => {
          readBody(answer).then((answerBody) => done({ status: answer.statusCode ?? 502, headers: headersOf(answer), body: answerBody }), fail);
        },
      );
      outgoing.on("error", fail);
      outgoing.end(body);
    });
  }

  private async serve(request: IncomingMessage, response: import("node:http").ServerResponse): Promise<void> {
    const method = request.method ?? "GET";
    const path = request.url ?? "/";
    const headers = headersOf(request);
    for (const name of this.stripRequestHeaders) delete headers[name];
    const body = await readBody(request);
    const fault = this.takeFault(method, path);
    let status: number;
    let answerHeaders: Record<string, string>;
    let payload: Buffer;
    if (fault !== undefined) {
      if (fault.forwardFirst) await this.forward(method, path, headers, body);
      if (fault.status === 0) {
        this.seen.push({ method, path, headers, status: 0, injected: true });
        response.socket?.destroy();
        return;
      }
      status = fault.status;
      answerHeaders = { "content-type": "application/json", ...fault.headers };
      payload = Buffer.from(JSON.stringify({ error: { code: CODES[fault.status] ?? "internal_error", message: "injected by the test proxy" } }));
    } else {
      ({ status, headers: answerHeaders, body: payload } = await this.forward(method, path, headers, body));
      if (method === "GET" && path.startsWith(this.prefix + "/generations/") && answerHeaders["retry-after"] !== undefined) {
        answerHeaders["retry-after"] = "1";
      }
    }
    this.seen.push({ method, path, headers, status, injected: fault !== undefined });
    response.writeHead(status, { ...answerHeaders, "content-length": String(payload.length) });
    response.end(payload);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((done) => this.server.close(done));
  }
}

export interface ReceivedWebhook {
  body: string;
  headers: Record<string, string>;
}

/** Records the webhooks POSTed to it and answers 204. */
export class Receiver {
  private received: ReceivedWebhook[] = [];
  private waiting: ((webhook: ReceivedWebhook) => void)[] = [];
  private constructor(private readonly server: HttpServer, readonly url: string) {}

  static async start(): Promise<Receiver> {
    let receiver: Receiver | undefined;
    const server = createServer((request, response) => {
      void readBody(request).then((body) => {
        const webhook = { body: body.toString("utf8"), headers: headersOf(request) };
        const waiter = receiver!.waiting.shift();
        if (waiter) waiter(webhook);
        else receiver!.received.push(webhook);
        response.writeHead(204).end();
      });
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    receiver = new Receiver(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/vidgate`);
    return receiver;
  }

  /** The next webhook, waiting up to 60 s for it. */
  next(): Promise<ReceivedWebhook> {
    const ready = this.received.shift();
    if (ready) return Promise.resolve(ready);
    return new Promise((done, fail) => {
      const timer = setTimeout(() => fail(new Error("no webhook within 60 s")), 60_000);
      this.waiting.push((webhook) => {
        clearTimeout(timer);
        done(webhook);
      });
    });
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((done) => this.server.close(done));
  }
}

/** One server, proxy and receiver for a test file, and clients for fresh accounts. */
export class World {
  private counter = 0;
  private constructor(readonly server: Server, readonly proxy: Proxy, readonly receiver: Receiver) {}

  static async start(): Promise<World> {
    const server = await Server.start();
    return new World(server, await Proxy.start(server.apiBase), await Receiver.start());
  }

  account(options: Parameters<Server["account"]>[1] = {}): Account {
    return this.server.account(`sdk-ts-${process.pid}-${++this.counter}`, options);
  }

  /** A client through the proxy with retry waits a hundred times shorter than the defaults. */
  client(account: Account, options: ClientOptions = {}): Vidgate {
    return new Vidgate({ apiKey: account.api_key, baseUrl: this.proxy.baseUrl, retryInitialDelay: 10, retryMaxDelay: 300, ...options });
  }

  async stop(): Promise<void> {
    await this.receiver.stop();
    await this.proxy.stop();
    await this.server.stop();
  }
}

let shared: Promise<World> | undefined;

/**
 * The one world of this test process: every test file asks for it in its
 * `before` hook and stops it in `after` (the first stop stops it), so all
 * files share one server when `all.test.js` runs them in one process.
 */
export function sharedWorld(): Promise<World> {
  shared ??= World.start();
  return shared;
}

export async function stopSharedWorld(): Promise<void> {
  const world = shared;
  shared = undefined;
  if (world !== undefined) await (await world).stop();
}

/**
 * The hooks every test file that talks to the server registers: it joins the
 * shared world before its tests (handing it to `onReady`), stops it after
 * them, and clears the proxy's faults and records before each test so that
 * no test sees what another injected or sent.
 */
export function joinSharedWorld(onReady: (world: World) => void): void {
  let joined: World | undefined;
  before(async () => {
    joined = await sharedWorld();
    onReady(joined);
  });
  after(async () => {
    await stopSharedWorld();
  });
  beforeEach(() => joined?.proxy.clear());
}

/** A valid PNG of one colour, made here so the tests ship no files. */
export function pngBytes(width = 320, height = 240): Uint8Array<ArrayBuffer> {
  const chunk = (kind: string, data: Buffer): Buffer => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const typed = Buffer.concat([Buffer.from(kind, "ascii"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(typed));
    return Buffer.concat([length, typed, crc]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8);
  const row = Buffer.concat([Buffer.from([0]), Buffer.alloc(width * 3, 0x60)]);
  const pixels = Buffer.concat(Array.from({ length: height }, () => row));
  return new Uint8Array(
    Buffer.concat([
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
      chunk("IHDR", header),
      chunk("IDAT", deflateSync(pixels)),
      chunk("IEND", Buffer.alloc(0)),
    ]),
  );
}
