-- queue.payload_bytes: the size of the row's payload as a replica reads it,
-- written with the row (drainer.enqueue and every other writer of the
-- queue), so that a claim bounded by max_in_flight_bytes sums its rows'
-- sizes without reading their intents (store/claim.go, claimBoundedSQL).
-- Rows queued before this migration have none: the claim measures their
-- payloads in intents.
ALTER TABLE {{.schema}}.queue ADD COLUMN payload_bytes integer;
