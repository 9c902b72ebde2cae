-- traceparent_error words why tp is not a W3C traceparent (version 00
-- form: version-trace_id-parent_id-flags, lowercase hex, no all-zero ids,
-- version ff invalid), or returns null when it is one.
CREATE OR REPLACE FUNCTION {{.schema}}.traceparent_error(tp text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE
        WHEN tp IS NULL THEN NULL
        WHEN tp !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
            format('traceparent %s is not a W3C trace context (version-trace_id-parent_id-flags in lowercase hex, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01)',
                   quote_literal(left(tp, 80)))
        WHEN left(tp, 2) = 'ff' THEN format('traceparent %s has the invalid version ff', quote_literal(tp))
        WHEN substr(tp, 4, 32) = repeat('0', 32) THEN format('traceparent %s has an all-zero trace id', quote_literal(tp))
        WHEN substr(tp, 37, 16) = repeat('0', 16) THEN format('traceparent %s has an all-zero parent id', quote_literal(tp))
    END
$function$;
