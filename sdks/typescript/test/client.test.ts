// The client's configuration and the checks made before anything is sent.
import assert from "node:assert/strict";
import { test } from "node:test";
import { APIError, InsufficientBalanceError, Vidgate, errorFromResponse } from "../src/index.js";

test("the client reads VIDGATE_API_KEY, VIDGATE_BASE_URL and VIDGATE_WEBHOOK_SECRET", () => {
  const saved = { ...process.env };
  try {
    process.env["VIDGATE_API_KEY"] = "vg_live_from_env";
    process.env["VIDGATE_BASE_URL"] = "http://example.invalid/api/v1/";
    process.env["VIDGATE_WEBHOOK_SECRET"] = "whsec_AAAA";
    const client = new Vidgate();
    assert.equal(client.baseUrl, "http://example.invalid/api/v1");
    assert.equal(client.settings.apiKey, "vg_live_from_env");
    assert.equal(client.settings.webhookSecret, "whsec_AAAA");
    const given = new Vidgate({ apiKey: "vg_live_given", baseUrl: "http://other.invalid/api/v1" });
    assert.equal(given.settings.apiKey, "vg_live_given");
    assert.equal(given.baseUrl, "http://other.invalid/api/v1");
  } finally {
    process.env = saved;
  }
});

test("ids are checked before anything is sent", async () => {
  const client = new Vidgate({ apiKey: "x", baseUrl: "http://127.0.0.1:9/api/v1", maxRetries: 0 });
  await assert.rejects(client.generations.create("vendor_1/model_1", { prompt: "x" }), TypeError);
  await assert.rejects(client.models.get("vendor_1"), TypeError);
  await assert.rejects(client.generations.get(""), TypeError);
  assert.throws(() => new Vidgate({ maxRetries: -1 }), RangeError);
});

test("an error answer becomes its typed error with the request id", () => {
  const error = errorFromResponse(402, { error: { code: "insufficient_balance", message: "Too poor." } }, "req-1");
  assert.ok(error instanceof InsufficientBalanceError);
  assert.deepEqual([error.status, error.code, error.message, error.param, error.requestId], [402, "insufficient_balance", "Too poor.", undefined, "req-1"]);
  assert.equal(error.name, "InsufficientBalanceError");
  const unknown = errorFromResponse(418, "<html>", undefined);
  assert.equal(unknown.constructor, APIError);
  assert.equal(unknown.code, "http_418");
});
