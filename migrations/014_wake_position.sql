-- The wake notification says where the new rows are.
--
-- A claim starts at the daemon's low-water mark (the last row it claimed),
-- so that it does not re-read the dead entries its earlier claims left at
-- the front of the due index. A producer's rows are due from the start of
-- its transaction, which may commit after later rows were claimed: they lie
-- behind the mark, where only a pass from the first due row (at most every
-- 100 ms when a claim comes back short, every 2 s under load) finds them.
-- At a few hundred rows a second that put 25-90 ms on a tenth of the rows.
--
-- The notification now carries the first new pending row's position in the
-- claim order, `<next_attempt_at in microseconds since the epoch>:<seq>`:
-- the woken daemon starts its next claim there when it lies behind its mark.
-- A statement that inserted no pending row (a duplicate enqueue, or an
-- intent of an aborted run, created cancelled) notifies nobody, nor does a
-- row due at 'infinity' (never due). Other notifications on the channel
-- keep their empty payload, which asks for a pass from the first due row.
-- The gate (013) is unchanged: producers notify only while a daemon sleeps.
CREATE OR REPLACE FUNCTION {{.schema}}.notify_outbox()
RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;

-- The same statement-level trigger, now with the inserted rows (the audit
-- trigger captures them already: one transition table serves both).
DROP TRIGGER outbox_notify ON {{.schema}}.outbox;
CREATE TRIGGER outbox_notify
    AFTER INSERT ON {{.schema}}.outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{.schema}}.notify_outbox();
