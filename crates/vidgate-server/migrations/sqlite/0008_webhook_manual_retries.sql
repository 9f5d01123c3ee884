-- How many times a customer asked for a delivery to be re-sent, so that
-- manual re-sends of one delivery are bounded.
ALTER TABLE webhook_deliveries ADD COLUMN manual_retries INTEGER NOT NULL DEFAULT 0;
