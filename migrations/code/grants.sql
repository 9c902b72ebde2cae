-- The functions that are not PUBLIC's, and who runs them. Each is granted
-- to every role that holds the named privilege on the named table, so an
-- existing runtime role keeps working across the upgrade that brought the
-- function (deploy/sql/roles.sql grants them to a new one). Installed
-- after the functions, in the same transaction.
DO $grants$
DECLARE
    f record;
    g record;
BEGIN
    FOR f IN SELECT v.fn::regprocedure AS fn, v.tab::regclass AS tab, v.privilege
               FROM (VALUES
                   -- the completion: the roles that may update the queue
                   ('{{.schema}}.complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean, smallint[])',
                    '{{.schema}}.queue', 'UPDATE'),
                   -- (and without the generations, for older replicas)
                   ('{{.schema}}.complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean)',
                    '{{.schema}}.queue', 'UPDATE'),
                   -- the rotation of generations: the same roles
                   ('{{.schema}}.rotate_queue(bigint, integer, interval, integer, integer)', '{{.schema}}.queue', 'UPDATE'),
                   -- (and with moves of a chunk, for older replicas)
                   ('{{.schema}}.rotate_queue(bigint, integer, interval, integer)', '{{.schema}}.queue', 'UPDATE'),
                   -- queue.gen's default: the roles that may insert into the queue
                   ('{{.schema}}.queue_generation()', '{{.schema}}.queue', 'INSERT'),
                   -- the audit's rotation: the roles that may prune it
                   ('{{.schema}}.rotate_audit(interval, interval)', '{{.schema}}.audit', 'DELETE'),
                   -- audit.part's default: the roles that may insert into it
                   ('{{.schema}}.audit_generation()', '{{.schema}}.audit', 'INSERT'),
                   -- `drainer audit checkpoint` extends the ledger it signs:
                   -- the roles that may read the audit
                   ('{{.schema}}.audit_horizon()', '{{.schema}}.audit', 'SELECT'),
                   ('{{.schema}}.audit_ledger_extend(bigint)', '{{.schema}}.audit', 'SELECT')
               ) AS v(fn, tab, privilege)
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.fn);
        FOR g IN SELECT DISTINCT e.grantee
                   FROM pg_catalog.pg_class c
                  CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
                  WHERE c.oid = f.tab AND e.privilege_type = f.privilege
                    AND e.grantee <> c.relowner AND e.grantee <> 0
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', f.fn, g.grantee::regrole);
        END LOOP;
    END LOOP;
END
$grants$;
