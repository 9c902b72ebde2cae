-- audit_anchor_hash is the hash of one anchor version (audit_anchors,
-- audit_anchor_history): the ledger record that holds it (p_record)
-- digests these. Text that anyone could have written (the key, the status,
-- the problem) goes in by its own SHA-256, so no two versions read alike.
-- ops.AnchorHash computes the same in Go.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_anchor_hash(p_vid bigint, p_key text, p_hash bytea, p_last_id bigint, p_status text, p_attempts integer, p_problem text, p_record bigint)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT sha256(convert_to(concat_ws(E'\x1f', 'anchor', p_vid::text,
        encode(sha256(convert_to(p_key, 'UTF8')), 'hex'), encode(p_hash, 'hex'), coalesce(p_last_id::text, ''),
        coalesce(encode(sha256(convert_to(p_status, 'UTF8')), 'hex'), ''), coalesce(p_attempts::text, ''),
        coalesce(encode(sha256(convert_to(p_problem, 'UTF8')), 'hex'), ''), p_record::text), 'UTF8'))
$function$;
