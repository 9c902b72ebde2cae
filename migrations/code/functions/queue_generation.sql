-- queue_generation is the default of queue.gen: the generation new rows go
-- to (queue_generations, rotate_queue). It runs with the owner's rights,
-- so whoever may insert into queue need not read queue_generations; it is
-- not PUBLIC's: code/grants.sql grants it to the roles that may insert into
-- the queue (deploy/sql/roles.sql grants the runtime role; a producer's
-- enqueue runs as the owner).
CREATE OR REPLACE FUNCTION {{.schema}}.queue_generation()
 RETURNS smallint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$ SELECT gen FROM {{.schema}}.queue_generations WHERE current $function$;

