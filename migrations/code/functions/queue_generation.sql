-- queue_generation is the default of queue.gen: the generation new rows go
-- to (queue_generations, rotate_queue). It runs with the owner's rights,
-- so whoever may insert into queue need not read queue_generations; it is
-- not PUBLIC's: the roles that may insert into the queue run it
-- (deploy/sql/roles.sql grants the runtime role; a producer's enqueue runs
-- as the owner).
CREATE OR REPLACE FUNCTION {{.schema}}.queue_generation()
 RETURNS smallint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$ SELECT gen FROM {{.schema}}.queue_generations WHERE current $function$;

REVOKE EXECUTE ON FUNCTION {{.schema}}.queue_generation() FROM PUBLIC;
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT e.grantee
               FROM pg_catalog.pg_class c
              CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
              WHERE c.oid = '{{.schema}}.queue'::regclass AND e.privilege_type = 'INSERT'
                AND e.grantee <> c.relowner AND e.grantee <> 0
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{.schema}}.queue_generation() TO %s', g.grantee::regrole);
    END LOOP;
END
$grants$;
