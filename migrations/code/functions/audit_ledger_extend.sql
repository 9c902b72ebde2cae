-- audit_ledger_extend appends to the ledger every entry with an id up to
-- p_upto that no record holds yet, one 'entries' record a generation, and
-- returns the ledger's last record: what a checkpoint signs. p_upto comes
-- from audit_horizon, whose transactions have ended (store.ExtendAuditLedger
-- makes sure). A rotation step that anchors or truncates holds the
-- ledger's lock; this waits for it. Owner's rights: nobody else writes the
-- ledger; code/grants.sql grants it to the roles that read the audit.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_ledger_extend(p_upto bigint, OUT n bigint, OUT hash bytea)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
DECLARE
    g record;
BEGIN
    IF p_upto IS NULL OR p_upto > (SELECT s.last_value FROM {{.schema}}.audit_entry_id s) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.audit_ledger_extend: no entry id %s was handed out yet (take it from audit_horizon)', p_upto);
    END IF;
    FOR g IN SELECT a.part, a.epoch FROM {{.schema}}.audit_generations a
              WHERE NOT a.ready AND a.epoch IS NOT NULL ORDER BY a.epoch LOOP
        PERFORM {{.schema}}.audit_ledger_entries(g.part, g.epoch, p_upto);
    END LOOP;
    SELECT l.n, l.hash INTO n, hash FROM {{.schema}}.audit_ledger l ORDER BY l.n DESC LIMIT 1;
END
$function$;
