-- audit_bucket is the bucket of p_buckets (a power of two) that key's
-- items fall into in a ledger record (audit_ledger): the first two bytes of
-- the key's SHA-256, modulo p_buckets. A digest per bucket tells which
-- chains a rewrite touched without the record holding one digest per chain.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_bucket(p_key text, p_buckets integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT ('x' || left(encode(sha256(convert_to(p_key, 'UTF8')), 'hex'), 4))::bit(16)::integer % p_buckets
$function$;
