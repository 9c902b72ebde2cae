-- audit_buckets is how many buckets a ledger record of p_items items
-- hashes them into: about four items a bucket, a power of two, at most
-- 4096 (so a record's vector, 36 bytes a bucket, stays under 150 kB).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_buckets(p_items bigint)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT coalesce((SELECT min(1 << i) FROM generate_series(0, 11) AS i WHERE (1::bigint << i) * 4 >= p_items), 4096)
$function$;
