-- audit_head is the hash a key's next entry links to: its latest entry, or
-- the anchor left when retention pruned the chain's older entries.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_head(p_key text)
 RETURNS bytea
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce((SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = p_key ORDER BY a.id DESC LIMIT 1),
                    (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = p_key))
$function$;
