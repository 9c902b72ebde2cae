-- audit_entries_vector digests the entries of generation p_part whose ids
-- are in (p_from, p_upto], as an 'entries' record of the ledger holds them
-- (audit_ledger): each entry is its id (8 bytes) and hash, each bucket of
-- keys (audit_bucket) the SHA-256 of its entries in id order, and the
-- vector each non-empty bucket's number (4 bytes) and digest, in order.
-- Equal vectors mean the same entries with the same hashes, and an entry's
-- hash covers its content and the entry before it.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_entries_vector(p_part smallint, p_from bigint, p_upto bigint, p_buckets integer)
 RETURNS TABLE(items bigint, vector bytea)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(sum(b.n), 0)::bigint,
           coalesce(string_agg(int4send(b.bucket) || b.digest, ''::bytea ORDER BY b.bucket), ''::bytea)
      FROM (SELECT {{.schema}}.audit_bucket(a.key, p_buckets) AS bucket, count(*) AS n,
                   sha256(string_agg(int8send(a.id) || a.hash, ''::bytea ORDER BY a.id)) AS digest
              FROM {{.schema}}.audit a
             WHERE a.part = p_part AND a.id > p_from AND a.id <= p_upto
             GROUP BY 1) b
$function$;
