/**
 * The API operations this library covers, by method and path (relative to
 * `baseUrl`, path parameters written `{}`; a trailing `*` stands for an
 * endpoint id `vendor/model/mode`), with the client method that calls each,
 * and the query parameters and body fields it knows (`*`: any, as run and
 * quote take the model's own input). The tests compare it with the server's
 * OpenAPI document, so an operation, parameter or field added to the API
 * fails them until the library knows it.
 */
export interface Operation {
  method: string;
  query?: readonly string[];
  body?: readonly string[];
}

export const OPERATIONS: Readonly<Record<string, Operation>> = {
  "GET /models": { method: "models.list" },
  "GET /models/{}/{}": { method: "models.get" },
  "POST /quote/*": { method: "quote", body: ["*"] },
  "POST /run/*": { method: "generations.create", body: ["*"] },
  "GET /generations": { method: "generations.list", query: ["limit", "cursor", "status", "model"] },
  "GET /generations/{}": { method: "generations.get" },
  "GET /generations/{}/events": { method: "generations.stream" },
  "POST /generations/{}/cancel": { method: "generations.cancel" },
  "GET /generations/{}/webhook-deliveries": { method: "webhooks.deliveries" },
  "POST /generations/{}/webhook-deliveries/{}/retry": { method: "webhooks.retryDelivery" },
  "POST /account/webhook-secret/rotate": { method: "webhooks.rotateSecret" },
  "GET /account": { method: "account.get" },
  "POST /account/checkout": { method: "account.checkout", body: ["amount_usd"] },
  "POST /uploads": { method: "uploads.create", body: ["file"] },
  "POST /uploads/initiate": { method: "uploads.initiate", body: ["content_type", "size_bytes"] },
  "GET /openapi.json": { method: "openapi" },
};
