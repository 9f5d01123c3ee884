"""A webhook receiver with the standard library only: verifies each
delivery and prints finished clips and low-balance alerts.

    export VIDGATE_WEBHOOK_SECRET=whsec_…
    python examples/webhook_receiver.py 8000
"""

import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import vidgate

SECRET = os.environ["VIDGATE_WEBHOOK_SECRET"]  # whsec_…


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            # The raw bytes, not re-serialised JSON.
            event = vidgate.webhooks.unwrap(body, dict(self.headers.items()), SECRET)
        except vidgate.WebhookVerificationError as error:
            self.send_response(401)
            self.end_headers()
            print("refused:", error)
            return
        if isinstance(event, vidgate.WebhookEvent):
            if event.type == "generation.succeeded" and event.data.output is not None:
                print(event.data.id, event.data.output.video_url)
            else:
                print(event.data.id, event.type)
        elif isinstance(event, vidgate.AccountBalanceLowEvent):
            print(f"balance ${event.data.balance_usd} is below ${event.data.threshold_usd}")
        else:
            # A type newer than this library: acknowledge it all the same.
            print("unhandled event", event.type)
        # A 2xx tells vidgate the delivery arrived; anything else is retried.
        self.send_response(204)
        self.end_headers()


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8000), Receiver).serve_forever()
