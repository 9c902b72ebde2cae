-- audit_vector_buckets names the buckets in which two vectors of a ledger
-- record (audit_entries_vector, audit_anchors_vector) differ: a bucket
-- digested differently, or present in one only.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_vector_buckets(p_recorded bytea, p_now bytea)
 RETURNS SETOF integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
    WITH r AS (SELECT ('x' || encode(substring(p_recorded FROM i * 36 + 1 FOR 4), 'hex'))::bit(32)::integer AS b,
                      substring(p_recorded FROM i * 36 + 5 FOR 32) AS d
                 FROM generate_series(0, length(p_recorded) / 36 - 1) AS i),
         n AS (SELECT ('x' || encode(substring(p_now FROM i * 36 + 1 FOR 4), 'hex'))::bit(32)::integer AS b,
                      substring(p_now FROM i * 36 + 5 FOR 32) AS d
                 FROM generate_series(0, length(p_now) / 36 - 1) AS i)
    SELECT coalesce(r.b, n.b) FROM r FULL JOIN n ON n.b = r.b WHERE r.d IS DISTINCT FROM n.d
$function$;
