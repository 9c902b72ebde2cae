-- audit_anchors_vector digests the anchor versions that ledger record
-- p_record holds, as audit_entries_vector digests entries: each version is
-- its vid (8 bytes) and row_hash, bucketed by key.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_anchors_vector(p_record bigint, p_buckets integer)
 RETURNS TABLE(items bigint, vector bytea)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(sum(b.n), 0)::bigint,
           coalesce(string_agg(int4send(b.bucket) || b.digest, ''::bytea ORDER BY b.bucket), ''::bytea)
      FROM (SELECT {{.schema}}.audit_bucket(v.key, p_buckets) AS bucket, count(*) AS n,
                   sha256(string_agg(int8send(v.vid) || coalesce(v.row_hash, ''::bytea), ''::bytea ORDER BY v.vid)) AS digest
              FROM (SELECT x.vid, x.key, x.row_hash FROM {{.schema}}.audit_anchors x WHERE x.record = p_record
                    UNION ALL
                    SELECT h.vid, h.key, h.row_hash FROM {{.schema}}.audit_anchor_history h WHERE h.record = p_record) v
             GROUP BY 1) b
$function$;
