-- The deliveries senders hold right now (and those whose sender died before
-- the lease ran out): a claim counts them per account, so that one account's
-- slow receiver cannot take all of a node's senders. Recording an attempt
-- clears the lease owner, so this index stays about as small as the number
-- of senders.
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (lease_owner, account_id)
    WHERE status = 'pending' AND lease_owner IS NOT NULL;
