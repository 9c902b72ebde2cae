-- audit_chain_forgotten says whether the chain of p_key is forgotten: its
-- key has no row (intents: a row written through drainer.outbox has no
-- key in keys until it is pruned), no tombstone (keys) and no entry left
-- (audit). Nothing links to its anchor then but a new entry, and nothing
-- is compared with it (audit_retire_anchors).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_chain_forgotten(p_key text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT NOT EXISTS (SELECT 1 FROM {{.schema}}.keys k WHERE k.key = p_key)
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.intents i WHERE i.key = p_key)
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.audit a WHERE a.key = p_key)
$function$;
