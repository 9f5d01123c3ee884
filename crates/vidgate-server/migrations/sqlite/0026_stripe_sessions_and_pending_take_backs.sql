-- Stripe money, whatever the order of its events and whoever else sells on
-- the Stripe account (issue 50).
--
-- Each Checkout Session vidgate made, recorded before its URL is handed to
-- the customer: only a recorded session is credited, to the account and for
-- the amount recorded here, so a paid session of another product on the
-- same Stripe account credits nothing even if it names an account.
CREATE TABLE stripe_checkout_sessions (
    checkout_session_id  TEXT PRIMARY KEY,
    account_id           TEXT NOT NULL REFERENCES accounts (id),
    amount_micros        BIGINT NOT NULL CHECK (amount_micros > 0),
    created_at           BIGINT NOT NULL
);

-- A refund, a dispute or a won dispute that arrived before the credit of
-- its payment (Stripe does not promise order, and a completion whose first
-- delivery failed arrives late). It waits here and is applied, in the order
-- received, in the transaction that credits the payment, so the account
-- ends where it would have ended in order. `amount_micros` is the charge's
-- refunds in total for a refund, the disputed amount for a dispute, and 0
-- for a won dispute. A payment that is never credited (another product's)
-- leaves its rows here, taking nothing.
CREATE TABLE stripe_pending_take_backs (
    event_id           TEXT PRIMARY KEY REFERENCES stripe_events (event_id),
    event_type         TEXT NOT NULL,
    payment_intent_id  TEXT NOT NULL,
    object_id          TEXT NOT NULL,
    kind               TEXT NOT NULL CHECK (kind IN ('refund', 'dispute', 'dispute_won')),
    amount_micros      BIGINT NOT NULL CHECK (amount_micros >= 0),
    received_at        BIGINT NOT NULL
);
CREATE INDEX stripe_pending_take_backs_payment_intent
    ON stripe_pending_take_backs (payment_intent_id, received_at);
