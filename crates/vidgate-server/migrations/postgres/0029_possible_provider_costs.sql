-- Whether a generation's provider cost is one the provider could not
-- confirm: the job a submit with an unknown outcome may have made, or a
-- task a cancel deleted that may have finished first (ModelArk's DELETE
-- also deletes a finished task). `vidgate admin usage` counts these costs
-- in the provider cost, so a margin is never overstated, and names them
-- apart, so the operator knows which part is a possibility.
ALTER TABLE generations ADD COLUMN provider_cost_possible BOOLEAN NOT NULL DEFAULT FALSE;
