// Run one generation and print the clip's URL.
//   export VIDGATE_API_KEY=vg_live_…  VIDGATE_BASE_URL=http://127.0.0.1:8080/api/v1
//   node dist-examples/run.js "a red kite over the sea at dawn"
import { GenerationFailedError, Vidgate } from "vidgate";

const vidgate = new Vidgate();
const quote = await vidgate.quote("vendor_1/model_1/text-to-video", { duration: 4, resolution: "480p" });
console.log(`this will cost $${quote.cost.amount_usd.toFixed(2)}`);
try {
  const generation = await vidgate.run(
    "vendor_1/model_1/text-to-video",
    { prompt: process.argv[2] ?? "a paper boat", duration: 4, resolution: "480p" },
    { timeout: 600_000 },
  );
  console.log(generation.id, generation.output?.video_url, `$${generation.cost.amount_usd.toFixed(2)}`);
} catch (error) {
  if (error instanceof GenerationFailedError) console.error("failed:", error.generation.error?.message);
  else throw error;
}
