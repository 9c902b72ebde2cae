-- Producers notify only when a daemon is waiting for it.
--
-- A notifying commit holds a server-wide lock until its WAL is flushed, so
-- notifying producers commit one at a time: single-row enqueues reached 0.47
-- of a plain insert's rate with the notification and 0.81 without it. But a
-- daemon needs the notification only while it sleeps: a busy one claims
-- again as soon as a slot frees or a claim comes back full.
--
-- The gate: a daemon about to sleep (its last claim came back short) takes
-- one of 8 slots (a seat lock only daemons use), then that slot's wake lock
-- exclusively, waiting for the producers that hold it shared: their
-- transactions inserted without notifying and are finishing. Once it holds
-- the lock, every such transaction has committed, and the daemon claims
-- once more from the first due row before it sleeps. The insert trigger
-- tries every slot's wake lock shared (held until its transaction ends): if
-- one is held or waited for by a daemon, it notifies; if it gets them all,
-- no daemon can start sleeping before this transaction ends, so none will
-- miss its rows. A daemon gives its slot back when a claim brings rows.
-- `drainer.notify = off` still turns notifications off; the daemons' poll
-- (1 s) finds the rows then, as it does for daemons older than this schema.
CREATE OR REPLACE FUNCTION {{.schema}}.notify_outbox()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('drainer.notify', true) IS DISTINCT FROM 'off' THEN
        FOR i IN 0..7 LOOP
            IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('{{.schema}}.wake.' || i, 0)) THEN
                PERFORM pg_notify('{{.schema}}.outbox', '');
                RETURN NULL;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;
