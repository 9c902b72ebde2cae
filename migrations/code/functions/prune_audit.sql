-- prune_audit deleted audit entries one by one; release 20's daemons call
-- it from their retention pass. Entries now leave only a generation at a
-- time, verified before they are anchored (rotate_audit): a deletion here
-- would anchor entries nobody checked, and leave the ledger's records
-- unverifiable. It deletes nothing and returns 0.
CREATE OR REPLACE FUNCTION {{.schema}}.prune_audit(p_before timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE sql
 STABLE
AS $function$
    SELECT 0
$function$;
