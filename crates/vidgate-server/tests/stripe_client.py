"""Stripe's own Python package against vidgate's fake Stripe.

`tests/it/stripe.rs` (`stripes_own_client_works_against_the_fake`) starts
the fake and runs this script with a Python that has the official `stripe`
package (CI installs it). The package creates a Checkout Session with the
parameters vidgate sends, replays the create with the same idempotency key,
and reads the session back, checking what Stripe's own code reads from the
answers: a fake that only agreed with vidgate's reading of Stripe would fail
here. It then prints the `Stripe-Signature` header the package makes for a
given payload and time, which the Rust test compares with its own signing.

Arguments: the fake's base URL, the secret key, the account id, the webhook
secret, a payload and a timestamp to sign.
"""

import sys

import stripe

BASE, SECRET_KEY, ACCOUNT_ID, WEBHOOK_SECRET, PAYLOAD, TIMESTAMP = sys.argv[1:7]


def check(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def checkout_round_trip():
    client = stripe.StripeClient(SECRET_KEY, base_addresses={"api": BASE}, max_network_retries=0)
    params = {
        "mode": "payment",
        "line_items": [
            {
                "price_data": {
                    "currency": "usd",
                    "unit_amount": 2000,
                    "product_data": {"name": "vidgate credit ($20.00)"},
                },
                "quantity": 1,
            }
        ],
        "client_reference_id": ACCOUNT_ID,
        "metadata": {"account_id": ACCOUNT_ID},
        "success_url": "https://vidgate.example/dashboard?checkout=success",
        "cancel_url": "https://vidgate.example/dashboard?checkout=canceled",
    }
    session = client.v1.checkout.sessions.create(params=params, options={"idempotency_key": "stripe-python-1"})
    check(isinstance(session, stripe.checkout.Session), f"a Session object: {type(session)}")
    check(session.object == "checkout.session", session.object)
    check(session.id.startswith("cs_"), session.id)
    check(session.url and session.url.endswith(session.id), session.url)
    check(session.amount_total == 2000 and session.currency == "usd", (session.amount_total, session.currency))
    check(session.client_reference_id == ACCOUNT_ID, session.client_reference_id)
    check(session.metadata["account_id"] == ACCOUNT_ID, session.metadata)
    check(session.payment_status == "unpaid" and session.status == "open", (session.payment_status, session.status))

    replayed = client.v1.checkout.sessions.create(params=params, options={"idempotency_key": "stripe-python-1"})
    check(replayed.id == session.id, f"the same key answers the same session: {replayed.id}")

    fetched = client.v1.checkout.sessions.retrieve(session.id)
    check(fetched.id == session.id and fetched.mode == "payment", fetched.id)

    try:
        client.v1.checkout.sessions.retrieve("cs_test_missing")
        raise SystemExit("FAILED: an unknown session was found")
    except stripe.InvalidRequestError as error:
        check(error.http_status == 404 and error.code == "resource_missing", (error.http_status, error.code))

    wrong_key = stripe.StripeClient("sk_test_wrong", base_addresses={"api": BASE}, max_network_retries=0)
    try:
        wrong_key.v1.checkout.sessions.retrieve(session.id)
        raise SystemExit("FAILED: a wrong key was accepted")
    except stripe.AuthenticationError:
        pass
    print("stripe: create, replay, retrieve, errors: ok")


checkout_round_trip()
header = stripe.WebhookSignature.generate_signature_header(PAYLOAD, WEBHOOK_SECRET, timestamp=int(TIMESTAMP))
# Stripe's own verification accepts it too.
stripe.WebhookSignature.verify_header(PAYLOAD, header, WEBHOOK_SECRET, tolerance=None)
print(f"signature: {header}")
