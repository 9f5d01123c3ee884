// Every test file in one process, sharing one server (see sharedWorld):
// `node build/test/all.js`. Each file also runs alone under `node --test`.
import "./client.test.js";
import "./errors.test.js";
import "./generations.test.js";
import "./live-status.test.js";
import "./openapi-drift.test.js";
import "./retries.test.js";
import "./uploads.test.js";
import "./webhook-events.test.js";
import "./webhooks.test.js";
