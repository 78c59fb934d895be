-- The compose demo's writer: one sample outbox row per second, as an application would write it
-- in its own transaction. `\watch 1` re-runs the INSERT every second until the container stops.
-- The table itself is created by the postgres service's init script (compose.yaml, configs).
\set ON_ERROR_STOP on
\echo 'writing one outbox row per second into public.outbox'

INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(),
       'Order',
       'order-' || (1 + floor(random() * 5))::int,
       (ARRAY['OrderCreated', 'OrderPaid', 'OrderShipped'])[1 + floor(random() * 3)::int],
       jsonb_build_object('amount', round((random() * 100)::numeric, 2), 'at', now())
\watch 1
