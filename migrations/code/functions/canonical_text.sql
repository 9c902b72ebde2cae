-- canonical_text is the canonical text of a payload (canonical_payload's)
-- from jsonb's text rendering of it, payload::text: numbers with their
-- trailing fractional zeros trimmed, as trim_scale trims them; the rest as
-- it is. In that rendering a number is -?digits[.digits] (never an
-- exponent) and a string is quoted, with its quotes and backslashes
-- escaped, so one pass of a regular expression does it: a string is kept,
-- and a number's trailing fractional zeros (with the point, when no other
-- digit follows it) are dropped. It does not recurse, nor parse the text
-- again, so it takes any payload jsonb took, however deeply nested (the
-- recursive canonical_payload of code revisions up to 30 ran out of stack,
-- 54001, below 5,000 levels).
CREATE OR REPLACE FUNCTION {{.schema}}.canonical_text(payload_text text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT regexp_replace(payload_text, '("(?:[^"\\]|\\.)*")|(\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g')
$function$;
