-- audit_ledger_next takes the ledger's lock for the caller's transaction
-- and returns the number its next record gets (audit_ledger_append), so
-- that the anchors a record holds can name it before it is written.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_ledger_next()
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('{{.schema}}.audit_ledger', 0));
    RETURN coalesce((SELECT max(l.n) FROM {{.schema}}.audit_ledger l), 0) + 1;
END
$function$;
