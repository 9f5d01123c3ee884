// A webhook receiver with node:http only: verifies each delivery and prints finished clips
// and low-balance alerts.
//   export VIDGATE_WEBHOOK_SECRET=whsec_…
//   node dist-examples/webhook-receiver.js 8000
import { createServer } from "node:http";
import { type UnknownWebhookEvent, WebhookVerificationError, webhooks } from "vidgate";

const secret = process.env["VIDGATE_WEBHOOK_SECRET"] ?? "";

createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on("data", (chunk: Buffer) => chunks.push(chunk));
  request.on("end", async () => {
    try {
      // The raw bytes, not re-serialised JSON.
      const event = await webhooks.unwrap(Buffer.concat(chunks), request.headers, secret);
      switch (event.type) {
        case "generation.succeeded":
        case "generation.failed":
        case "generation.canceled":
          console.log(event.data.id, event.type, event.data.output?.video_url ?? "");
          break;
        case "account.balance_low":
          console.log(`balance $${event.data.balance_usd} is below $${event.data.threshold_usd}`);
          break;
        default:
          // A type newer than this library: acknowledge it all the same.
          console.log("unhandled event", (event as UnknownWebhookEvent).type);
      }
      // A 2xx tells vidgate the delivery arrived; anything else is retried.
      response.writeHead(204).end();
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) throw error;
      console.error("refused:", error.message);
      response.writeHead(401).end();
    }
  });
}).listen(Number(process.argv[2] ?? 8000), "127.0.0.1");
