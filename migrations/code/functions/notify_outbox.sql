-- notify_outbox wakes a sleeping daemon when rows are enqueued. Producers
-- notify only while a daemon sleeps (the wake gate: a daemon about to sleep
-- holds one of 8 advisory-lock slots; a producer's transaction holds them
-- shared until it ends), since a notifying commit holds a server-wide lock
-- until its WAL is flushed. The notification carries the first new pending
-- row's position in the claim order, `<next_attempt_at in microseconds since
-- the epoch>:<seq>`, so the woken daemon starts its next claim there when it
-- lies behind its low-water mark. A statement that inserted no pending row
-- (a duplicate enqueue, an intent of an aborted run, created cancelled)
-- notifies nobody, nor does a row due at 'infinity'. `SET drainer.notify =
-- off` turns notifications off.
CREATE OR REPLACE FUNCTION {{.schema}}.notify_outbox()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    first_due text;
BEGIN
    IF current_setting('drainer.notify', true) IS DISTINCT FROM 'off' THEN
        FOR i IN 0..7 LOOP
            IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('{{.schema}}.wake.' || i, 0)) THEN
                SELECT (extract(epoch FROM n.next_attempt_at) * 1000000)::bigint || ':' || n.seq
                  INTO first_due
                  FROM new_rows n
                 WHERE n.status = 'pending' AND isfinite(n.next_attempt_at)
                 ORDER BY n.next_attempt_at, n.seq
                 LIMIT 1;
                IF first_due IS NOT NULL THEN
                    PERFORM pg_notify('{{.schema}}.outbox', first_due);
                END IF;
                RETURN NULL;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$function$;
