-- audit_hash is the chain function, shared by writers and the verifier.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_hash(prev bytea, key text, at timestamp with time zone, event text, from_status text, to_status text, attempts integer, response_status integer, actor text, reason text, detail bytea)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    SELECT sha256(coalesce($1, ''::bytea) || convert_to(concat_ws(E'\x1f',
        $2, (extract(epoch FROM $3) * 1000000)::bigint::text, $4, coalesce($5, ''), coalesce($6, ''),
        coalesce($7::text, ''), coalesce($8::text, ''), $9, coalesce($10, ''),
        coalesce(encode($11, 'hex'), '')), 'UTF8'))
$function$;
