-- audit_horizon returns the largest entry id handed out so far, and the
-- transactions running now (open_transactions): once none of them runs,
-- every entry with an id up to it is written for good, or never will be
-- (ids come from one sequence, in order; a writer takes its id inside its
-- transaction). `drainer audit checkpoint` waits for them
-- (store.AuditHorizon) before it extends the ledger that far. The
-- sequence is read first: a transaction that takes an id before that read
-- is running at the second, or done. Owner's rights (the sequence is not
-- the runtime role's); granted with audit_ledger_extend.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_horizon(OUT upto bigint, OUT wait_for text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO upto FROM {{.schema}}.audit_entry_id s;
    wait_for := {{.schema}}.open_transactions();
END
$function$;
