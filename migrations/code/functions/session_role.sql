-- session_role names the role a session acts as: the role chosen with SET
-- ROLE, else the session user. Outside SECURITY DEFINER functions that is
-- current_user; inside them, where current_user is their owner, it still
-- names the caller. (The setting role can only name a role the session user
-- may become; "none" is reserved and never a role's name.)
CREATE OR REPLACE FUNCTION {{.schema}}.session_role()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text)
$function$;
