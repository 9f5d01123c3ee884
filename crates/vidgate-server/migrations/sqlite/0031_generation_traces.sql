-- The W3C traceparent of the request that submitted a generation, while
-- tracing is on (issue 54): the worker that runs it, and the webhooks that
-- tell of it, later and on any node, continue that trace. NULL when tracing
-- was off or the request was not traced.
ALTER TABLE generations ADD COLUMN traceparent TEXT;
