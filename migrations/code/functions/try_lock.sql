-- try_lock locks p_rel in p_mode (SHARE, EXCLUSIVE or ACCESS EXCLUSIVE) within the
-- caller's lock_timeout and says whether it got the lock: a rotation
-- (rotate_queue, rotate_audit) that did not answers busy and tries again
-- later, instead of failing its transaction. It runs with its caller's
-- rights.
CREATE OR REPLACE FUNCTION {{.schema}}.try_lock(p_rel regclass, p_mode text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_mode NOT IN ('SHARE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.try_lock: lock mode %L is not one a rotation takes', p_mode);
    END IF;
    EXECUTE format('LOCK TABLE %s IN %s MODE', p_rel, p_mode);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$function$;
