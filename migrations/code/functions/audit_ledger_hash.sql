-- audit_ledger_hash is the ledger's chain function: a record's hash covers
-- the record before it (p_prev) and every field but its vector, whose
-- digest it covers. `drainer audit verify --checkpoints` computes the same
-- in Go (ops.LedgerHash).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_ledger_hash(p_prev bytea, p_n bigint, p_kind text, p_epoch bigint, p_part smallint, p_from bigint, p_upto bigint, p_items bigint, p_buckets integer, p_digest bytea, p_at timestamp with time zone)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT sha256(coalesce(p_prev, ''::bytea) || convert_to(concat_ws(E'\x1f', 'ledger',
        p_n::text, p_kind, coalesce(p_epoch::text, ''), coalesce(p_part::text, ''), coalesce(p_from::text, ''),
        coalesce(p_upto::text, ''), p_items::text, p_buckets::text, coalesce(encode(p_digest, 'hex'), ''),
        (extract(epoch FROM p_at) * 1000000)::bigint::text), 'UTF8'))
$function$;
