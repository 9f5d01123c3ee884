"""Run one generation and print the clip's URL.

    export VIDGATE_API_KEY=vg_live_…  VIDGATE_BASE_URL=http://127.0.0.1:8080/api/v1
    python examples/run_generation.py "a red kite over the sea at dawn"
"""

import sys

import vidgate

with vidgate.Client() as client:
    quote = client.quote("vendor_1/model_1/text-to-video", {"duration": 4, "resolution": "480p"})
    print(f"this will cost ${quote.cost.amount_usd:.2f}")
    generation = client.run(
        "vendor_1/model_1/text-to-video",
        {"prompt": sys.argv[1] if len(sys.argv) > 1 else "a paper boat", "duration": 4,
         "resolution": "480p"},
        timeout=600,
    )
    assert generation.output is not None
    print(generation.id, generation.output.video_url, f"${generation.cost.amount_usd:.2f}")
