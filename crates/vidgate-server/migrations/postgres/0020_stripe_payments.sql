-- Money in through Stripe Checkout (issue 41).
--
-- Money Stripe takes back (a refund, a dispute) after the account spent it
-- cannot come out of the balance, which never goes below zero: the rest
-- becomes the account's debt. Money that reaches the balance later (a
-- credit, a released hold) pays the debt first, so `credited = balance +
-- held + captured` still holds and the balance the customer sees is
-- `balance - debt`, negative while a debt is owed. A submit needs a
-- balance that covers its price, so a debt stops submits until a top-up
-- pays it.
ALTER TABLE accounts ADD COLUMN debt_micros BIGINT NOT NULL DEFAULT 0 CHECK (debt_micros >= 0);

-- The outside ids a ledger entry carries (Stripe's session, payment intent,
-- charge, dispute and event ids), so that a customer and an operator can
-- match the entry with Stripe's records.
ALTER TABLE ledger_entries ADD COLUMN reference TEXT;

-- Each paid Checkout Session, credited once: its id is the key, so a second
-- event about the same session (`checkout.session.completed`, then
-- `checkout.session.async_payment_succeeded`, or a retry of either) finds it
-- and credits nothing. What was taken back of it is counted here so that
-- refunds (Stripe reports the total refunded so far) take back only their
-- difference, and nothing takes back more than was paid.
CREATE TABLE stripe_payments (
    checkout_session_id  TEXT PRIMARY KEY,
    account_id           TEXT NOT NULL REFERENCES accounts (id),
    payment_intent_id    TEXT,
    amount_micros        BIGINT NOT NULL CHECK (amount_micros > 0),
    refunded_micros      BIGINT NOT NULL DEFAULT 0 CHECK (refunded_micros >= 0),
    disputed_micros      BIGINT NOT NULL DEFAULT 0 CHECK (disputed_micros >= 0),
    credited_at          BIGINT NOT NULL
);
CREATE INDEX stripe_payments_payment_intent ON stripe_payments (payment_intent_id);

-- Every Stripe event that moved money, written in the transaction of the
-- movement: a replayed event finds its id here and moves nothing again.
CREATE TABLE stripe_events (
    event_id     TEXT PRIMARY KEY,
    event_type   TEXT NOT NULL,
    received_at  BIGINT NOT NULL
);
