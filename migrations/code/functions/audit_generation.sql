-- audit_generation is the default of audit.part: the generation new
-- entries go to (audit_generations, rotate_audit). It runs with the
-- owner's rights, so whoever may insert into audit need not read
-- audit_generations; it is not PUBLIC's: code/grants.sql grants it to the
-- roles that may insert into audit (drainer's own writers run as the
-- owner).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_generation()
 RETURNS smallint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$ SELECT part FROM {{.schema}}.audit_generations WHERE current $function$;
