-- audit_ledger_append appends record p_n to the ledger (audit_ledger), which
-- must be the next one: its digest is the vector's SHA-256, its prev the
-- hash of the record before it. The ledger's lock (taken here, held by the
-- caller's transaction) keeps its records in one chain. It runs with its
-- caller's rights: rotate_audit and audit_ledger_extend, as the owner.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_ledger_append(p_n bigint, p_kind text, p_epoch bigint, p_part smallint, p_from bigint, p_upto bigint, p_items bigint, p_buckets integer, p_vector bytea)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_last   bigint;
    v_prev   bytea;
    v_at     timestamptz := clock_timestamp();
    v_digest bytea := sha256(p_vector);
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('{{.schema}}.audit_ledger', 0));
    SELECT l.n, l.hash INTO v_last, v_prev FROM {{.schema}}.audit_ledger l ORDER BY l.n DESC LIMIT 1;
    IF p_n IS DISTINCT FROM coalesce(v_last, 0) + 1 THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = format('drainer.audit_ledger_append: record %s is not the next one (the ledger ends at %s)', p_n, v_last);
    END IF;
    INSERT INTO {{.schema}}.audit_ledger (n, kind, epoch, part, from_id, upto_id, items, buckets, digest, vector, at, prev, hash)
    VALUES (p_n, p_kind, p_epoch, p_part, p_from, p_upto, p_items, p_buckets, v_digest, p_vector, v_at, v_prev,
            {{.schema}}.audit_ledger_hash(v_prev, p_n, p_kind, p_epoch, p_part, p_from, p_upto, p_items, p_buckets,
                                          v_digest, v_at));
    RETURN p_n;
END
$function$;
