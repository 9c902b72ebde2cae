-- The producer-facing functions run with their owner's rights (the role that
-- ran `drainer migrate`), so an agent's role needs USAGE on the schema and
-- EXECUTE on drainer.enqueue, drainer.result and drainer.abort_run, and no
-- privilege on any table: it cannot insert, update or delete a row, nor
-- write an audit entry, other than through them. Signatures are unchanged
-- (expand/contract: release N's daemon and producers call them as before).
--
-- Every SECURITY DEFINER function pins its search_path, so no object of the
-- caller's (a temporary table or function, another schema) can stand in for
-- one the function uses.

-- session_role names the role a session acts as: the role chosen with SET
-- ROLE, else the session user. Outside SECURITY DEFINER functions that is
-- current_user; inside them, where current_user is their owner, it still
-- names the caller. (The setting role can only name a role the session user
-- may become; "none" is reserved and never a role's name.)
CREATE FUNCTION {{.schema}}.session_role()
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text)
$$;

-- The audit names the caller, not the functions' owner: an operator
-- command's drainer.actor, "drainer" for the daemon's own connections
-- (application_name=drainer), anything else "db:<role>", the role the
-- session acts as (what current_user named before the functions below
-- became SECURITY DEFINER).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_actor() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('drainer.actor', true), ''),
                    CASE WHEN current_setting('application_name', true) = 'drainer' THEN 'drainer'
                         ELSE 'db:' || {{.schema}}.session_role() END)
$$;

-- abort_run records "agent:<role>" as the run's aborter, as before.
CREATE OR REPLACE FUNCTION {{.schema}}.abort_run(agent_run_id text, reason text)
RETURNS integer LANGUAGE plpgsql
SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp AS $$
BEGIN
    IF agent_run_id IS NULL OR agent_run_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'drainer.abort_run: agent_run_id must not be empty';
    END IF;
    RETURN {{.schema}}.abort_run_internal(agent_run_id, coalesce(nullif(reason, ''), 'aborted by the agent'),
                                          'agent:' || {{.schema}}.session_role());
END
$$;

-- The other bodies stay as they are; only how they run changes.
-- The producer's functions: enqueue (its prune-race path deletes the row it
-- just inserted, which the caller could not) and result.
ALTER FUNCTION {{.schema}}.enqueue(text, text, text, text, jsonb, text)
    SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp;
ALTER FUNCTION {{.schema}}.result(text)
    SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp;
-- abort_run_internal takes the actor as an argument: only abort_run, the
-- forward-failed trigger and `drainer abort` (the runtime role) call it.
ALTER FUNCTION {{.schema}}.abort_run_internal(text, text, text)
    SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp;
-- A forward row that fails aborts its run whoever failed it, without
-- EXECUTE on abort_run_internal.
ALTER FUNCTION {{.schema}}.on_forward_failed()
    SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp;
-- The audit: the outbox's trigger and audit_append write the entries, so no
-- role but the owner needs INSERT on the audit table.
ALTER FUNCTION {{.schema}}.audit_rows()
    SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp;
ALTER FUNCTION {{.schema}}.audit_append(text, text, text)
    SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp;

-- Nobody runs them with the owner's rights unless granted: deploy/sql/roles.sql
-- grants enqueue, result and abort_run to the producer role, abort_run_internal
-- and audit_append to the runtime role. (Trigger functions cannot be called
-- directly.)
REVOKE EXECUTE ON FUNCTION {{.schema}}.enqueue(text, text, text, text, jsonb, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{.schema}}.result(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{.schema}}.abort_run(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{.schema}}.abort_run_internal(text, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{.schema}}.audit_append(text, text, text) FROM PUBLIC;
-- The enqueue counters (007) are called by enqueue alone, now as the owner:
-- nobody else bumps them.
REVOKE EXECUTE ON FUNCTION {{.schema}}.count_enqueue_duplicate() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{.schema}}.count_enqueue_mismatch() FROM PUBLIC;

-- Until now any role could execute the five functions above, and needed
-- table privileges instead. So that the roles of an existing deployment keep working between
-- `drainer migrate` and applying deploy/sql/roles.sql, a role holding the
-- table privilege a function needed gets EXECUTE on it: INSERT on outbox for
-- enqueue, SELECT on outbox for result, UPDATE on outbox for abort_run and
-- abort_run_internal, INSERT on audit for audit_append. roles.sql then sets
-- each role's grants exactly. On a new schema no role holds any: nothing is
-- granted.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        WITH acl AS (
            SELECT c.oid AS rel, c.relowner AS owner, c.relacl AS acl
              FROM pg_catalog.pg_class c
             WHERE c.oid IN ('{{.schema}}.outbox'::regclass, '{{.schema}}.audit'::regclass)
            UNION ALL
            SELECT c.oid, c.relowner, a.attacl
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
             WHERE c.oid IN ('{{.schema}}.outbox'::regclass, '{{.schema}}.audit'::regclass)
               AND a.attacl IS NOT NULL
        )
        SELECT DISTINCT f.fn, e.grantee
          FROM acl
         CROSS JOIN LATERAL pg_catalog.aclexplode(acl.acl) e
          JOIN (VALUES ('{{.schema}}.outbox'::regclass, 'INSERT', '{{.schema}}.enqueue(text, text, text, text, jsonb, text)'),
                       ('{{.schema}}.outbox'::regclass, 'SELECT', '{{.schema}}.result(text)'),
                       ('{{.schema}}.outbox'::regclass, 'UPDATE', '{{.schema}}.abort_run(text, text)'),
                       ('{{.schema}}.outbox'::regclass, 'UPDATE', '{{.schema}}.abort_run_internal(text, text, text)'),
                       ('{{.schema}}.audit'::regclass, 'INSERT', '{{.schema}}.audit_append(text, text, text)'))
               AS f(rel, priv, fn)
            ON f.rel = acl.rel AND f.priv = e.privilege_type
         WHERE e.grantee <> acl.owner
         ORDER BY 1, 2
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', g.fn,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;
