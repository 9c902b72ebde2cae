-- audit_ledger_entries appends to the ledger the entries of generation
-- p_part (epoch p_epoch) that no record holds yet, up to id p_upto, as one
-- 'entries' record (none when there are none), and returns the number of
-- entries it holds. The caller makes sure that every entry with an id up
-- to p_upto is written for good (rotate_audit: the generation is final;
-- audit_ledger_extend: audit_horizon). Caller's rights.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_ledger_entries(p_part smallint, p_epoch bigint, p_upto bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_n     bigint := {{.schema}}.audit_ledger_next();
    v_from  bigint;
    v_count bigint;
    v_b     integer;
    v_items bigint;
    v_vec   bytea;
BEGIN
    SELECT coalesce(max(l.upto_id), 0) INTO v_from
      FROM {{.schema}}.audit_ledger l WHERE l.kind = 'entries' AND l.epoch = p_epoch;
    IF p_upto IS NULL OR p_upto <= v_from THEN
        RETURN 0;
    END IF;
    SELECT count(*) INTO v_count FROM {{.schema}}.audit a WHERE a.part = p_part AND a.id > v_from AND a.id <= p_upto;
    IF v_count = 0 THEN
        RETURN 0;
    END IF;
    v_b := {{.schema}}.audit_buckets(v_count);
    SELECT v.items, v.vector INTO v_items, v_vec FROM {{.schema}}.audit_entries_vector(p_part, v_from, p_upto, v_b) v;
    PERFORM {{.schema}}.audit_ledger_append(v_n, 'entries', p_epoch, p_part, v_from, p_upto, v_items, v_b, v_vec);
    RETURN v_items;
END
$function$;
