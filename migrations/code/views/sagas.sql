-- sagas: one row per aborted run with its saga state and counts, readable
-- with one query: SELECT * FROM drainer.sagas WHERE agent_run_id = $1.
CREATE OR REPLACE VIEW {{.schema}}.sagas AS
SELECT r.agent_run_id,
       r.saga_state,
       r.saga_note,
       r.aborted_at,
       r.abort_reason,
       r.aborted_by,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status IN ('pending', 'in_flight'))  AS forward_open,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'succeeded')               AS forward_succeeded,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'compensated')             AS forward_compensated,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'failed')                  AS forward_failed,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'cancelled')               AS forward_cancelled,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status IN ('pending', 'in_flight')) AS compensations_open,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status = 'succeeded')          AS compensations_succeeded,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status = 'compensation_failed') AS compensations_failed,
       r.saga_updated_at
  FROM {{.schema}}.runs r
  LEFT JOIN {{.schema}}.outbox o ON o.agent_run_id = r.agent_run_id
 GROUP BY r.agent_run_id;
