-- Release 31's code package (code revision 33: every function, view and
-- trigger of the schema as that release installed them), rendered for
-- schema drainer and kept verbatim: TestUpgradeTo032RetiresForgottenAnchors
-- builds a release-31 schema from it, whose anchors stayed for good.
-- The current definition of every function, view and trigger of the
-- schema, one file each; `drainer migrate` installs them after the
-- numbered migrations (which keep tables and data, and the history).
-- Function bodies are checked when they run, not here, so the order of
-- the functions does not matter; views follow the functions they call,
-- triggers the functions they run.
SET LOCAL check_function_bodies = off;

-- abort_run: the agent decided the run must be undone. Runs in the caller's
-- transaction; records "agent:<role>" as the aborter and returns how many
-- never-attempted rows were cancelled (abort_run_internal).
CREATE OR REPLACE FUNCTION drainer.abort_run(agent_run_id text, reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF agent_run_id IS NULL OR agent_run_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'drainer.abort_run: agent_run_id must not be empty';
    END IF;
    RETURN drainer.abort_run_internal(agent_run_id, coalesce(nullif(reason, ''), 'aborted by the agent'),
                                          'agent:' || drainer.session_role());
END
$function$;

-- abort_run_internal marks a run aborted and cancels its never-attempted
-- forward rows; rows already attempted finish first (their effect may
-- exist), then the daemon compensates the run's succeeded rows. The first
-- abort's actor and reason stay on the run; an agent's or an operator's
-- abort after it is counted (abort_requests: requeue then never revives the
-- run), and an agent's is recorded on the run's audit chain (an operator's
-- command records its own, with its note). It wakes the daemons' claim and
-- saga loops.
CREATE OR REPLACE FUNCTION drainer.abort_run_internal(p_run text, p_reason text, p_actor text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n integer;
    v_request integer := CASE WHEN p_actor = 'drainer' THEN 0 ELSE 1 END;
BEGIN
    INSERT INTO drainer.runs AS r (agent_run_id, abort_reason, aborted_by, abort_requests)
    VALUES (p_run, p_reason, p_actor, v_request)
    ON CONFLICT (agent_run_id) DO UPDATE SET abort_requests = r.abort_requests + v_request;
    IF p_actor LIKE 'agent:%' THEN
        PERFORM drainer.audit_append('run:' || p_run, 'agent:abort', p_reason);
    END IF;

    -- The run's rows, found through its intents first (an array, looked
    -- up once by the run's index), then each by its key: joined, the plan
    -- could walk every pending row instead, whenever the statistics were
    -- taken before the queue filled (a new generation not analyzed yet).
    UPDATE drainer.queue o
       SET status = 'cancelled',
           cancel_cause = 'run_aborted',
           last_error = 'run aborted: ' || p_reason,
           updated_at = now()
     WHERE o.seq = ANY (ARRAY(SELECT i.seq FROM drainer.intents i WHERE i.agent_run_id = p_run))
       AND o.kind = 'forward'
       AND o.status = 'pending'
       AND o.attempts = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pg_notify('drainer.outbox', '');
    PERFORM pg_notify('drainer.saga', p_run);
    RETURN n;
END
$function$;

-- advance_saga moves one aborted run's saga a step: attempted and parked
-- (outcome_unknown) forward rows finish first, saying so in saga_note; then
-- each succeeded forward row of a compensable tool is compensated, one at a
-- time, in reverse seq order; a compensation_failed row halts the saga
-- until `drainer resolve`. p_tools and p_comp_tools map tools to their
-- compensation tools (the daemon's routes). Compensation rows join the key
-- space like every other row. It returns the saga's state, 'busy' when
-- another replica is advancing the run, 'none' when the run is not aborted.
CREATE OR REPLACE FUNCTION drainer.advance_saga(p_run text, p_tools text[], p_comp_tools text[])
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_state    text;
    v_note     text;
    v_parked   text;
    f          record;
    v_comp     text;
    v_key      text;
    v_existing record;
    v_payload  jsonb;
    v_fresh        boolean;
    v_forward_open boolean;
    v_parked_seq   bigint;
    v_comp_open    boolean;
    v_comp_failed  boolean;
    v_next         bigint;
    v_cancelled    boolean := false;
BEGIN
    IF NOT pg_try_advisory_xact_lock(drainer.saga_lock_key(p_run)) THEN
        RETURN 'busy'; -- another replica is advancing this run right now
    END IF;
    SELECT r.saga_state, r.saga_note INTO v_state, v_note FROM drainer.runs r WHERE r.agent_run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'none';
    END IF;
    IF v_note LIKE 'waiting for parked step %' THEN
        v_note := NULL;
    END IF;

    LOOP
        -- The run's rows, read once a step: what stops the saga, and the
        -- newest succeeded forward row of a compensable tool. (One pass:
        -- each of the run's rows is looked up in the queue once, so a saga
        -- of n compensations reads its n rows n times, not six times n.)
        SELECT bool_or(i.kind = 'forward' AND q.status = 'pending' AND q.attempts = 0),
               bool_or(i.kind = 'forward' AND q.status IN ('pending', 'in_flight')),
               min(i.seq) FILTER (WHERE i.kind = 'forward' AND q.status = 'outcome_unknown'),
               bool_or(i.kind = 'compensation' AND q.status IN ('pending', 'in_flight')),
               bool_or(i.kind = 'compensation' AND q.status = 'compensation_failed'),
               max(i.seq) FILTER (WHERE i.kind = 'forward' AND q.status = 'succeeded'
                                    AND i.tool_name IN (SELECT m.tool FROM unnest(p_tools, p_comp_tools) AS m(tool, comp)
                                                         WHERE m.comp IS NOT NULL AND m.comp <> ''))
          INTO v_fresh, v_forward_open, v_parked_seq, v_comp_open, v_comp_failed, v_next
          FROM drainer.intents i
          JOIN drainer.queue q ON q.seq = i.seq
         WHERE i.agent_run_id = p_run;

        IF v_fresh AND NOT v_cancelled THEN
            -- A row enqueued concurrently with the abort (neither saw the
            -- other) is cancelled here, as the abort would have done.
            UPDATE drainer.queue o
               SET status = 'cancelled', cancel_cause = 'run_aborted', updated_at = now(),
                   last_error = 'run aborted: ' || (SELECT r.abort_reason FROM drainer.runs r WHERE r.agent_run_id = p_run)
              FROM drainer.intents i
             WHERE i.agent_run_id = p_run AND o.seq = i.seq AND o.kind = 'forward' AND o.status = 'pending' AND o.attempts = 0;
            v_cancelled := true;
            CONTINUE;
        END IF;
        -- Attempted forward rows finish first: their effect may exist.
        IF v_forward_open THEN
            v_state := 'waiting';
            EXIT;
        END IF;
        -- So do parked ones: their effect may exist too, and compensating
        -- around them would undo the run out of order. A human's resolve
        -- (succeeded or failed) lets the saga go on.
        IF v_parked_seq IS NOT NULL THEN
            SELECT i.key INTO v_parked FROM drainer.intents i WHERE i.seq = v_parked_seq;
            v_note := format('waiting for parked step %s (outcome_unknown): resolve it with drainer resolve before the saga compensates', v_parked);
            v_state := 'waiting';
            EXIT;
        END IF;
        -- One compensation at a time.
        IF v_comp_open THEN
            v_state := 'compensating';
            EXIT;
        END IF;
        -- A compensation that cannot succeed halts the saga until a human resolves it.
        IF v_comp_failed THEN
            v_state := 'halted';
            EXIT;
        END IF;
        IF v_next IS NULL THEN
            v_state := 'done';
            EXIT;
        END IF;

        SELECT o.seq, o.key, o.step_id, o.business_scope, o.payload, o.response, m.comp
          INTO f
          FROM drainer.outbox o
          JOIN unnest(p_tools, p_comp_tools) AS m(tool, comp) ON m.tool = o.tool_name
         WHERE o.seq = v_next AND m.comp IS NOT NULL AND m.comp <> ''
         LIMIT 1;

        v_comp := f.comp;
        v_key := drainer.idempotency_key(p_run, f.step_id, v_comp, f.business_scope);
        SELECT o.status, o.forward_key INTO v_existing FROM drainer.outbox o WHERE o.key = v_key;
        IF FOUND THEN
            IF v_existing.forward_key IS DISTINCT FROM f.key THEN
                -- Two forward rows of one step and scope share a compensation
                -- tool: their compensation tuples collide. Stop for a human.
                v_note := format('compensation %s of row %s collides with the compensation of row %s (same step, scope and compensation tool)',
                                 v_key, f.key, v_existing.forward_key);
                v_state := 'halted';
                EXIT;
            END IF;
            IF v_existing.status IN ('succeeded', 'cancelled') THEN
                -- Undone (or resolved by a human) already: record it and go on.
                UPDATE drainer.queue SET status = 'compensated', updated_at = now()
                 WHERE seq = f.seq AND status = 'succeeded';
                CONTINUE;
            END IF;
            v_state := 'compensating';
            EXIT;
        END IF;

        v_payload := jsonb_build_object('forward_key', f.key, 'forward_payload', f.payload,
                                        'forward_response', coalesce(f.response, 'null'::jsonb));
        INSERT INTO drainer.keys (key, payload_hash)
        VALUES (v_key, drainer.payload_hash(v_payload))
        ON CONFLICT (key) DO NOTHING;
        WITH i AS (
            INSERT INTO drainer.intents AS i
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, forward_key)
            VALUES (v_key, p_run, f.step_id, v_comp, f.business_scope, 'compensation', v_payload,
                    drainer.payload_hash(v_payload), f.key)
            ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
            RETURNING i.seq, i.tool_name, i.business_scope, pg_column_size(i.payload) AS payload_bytes
        )
        INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, payload_bytes)
        SELECT i.seq, i.tool_name, i.business_scope, 'compensation', i.payload_bytes FROM i;
        v_state := 'compensating';
        EXIT;
    END LOOP;

    UPDATE drainer.runs r
       SET saga_state = v_state, saga_updated_at = now(), saga_note = v_note
     WHERE r.agent_run_id = p_run
       AND (r.saga_state IS DISTINCT FROM v_state OR r.saga_note IS DISTINCT FROM v_note);
    RETURN v_state;
END
$function$;

-- alert_tool is the tool_name of the alert row queued for each
-- compensation_failed row (outbox.AlertTool in the daemon; a test checks
-- they agree). Alert rows never abort a run.
CREATE OR REPLACE FUNCTION drainer.alert_tool()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT 'drainer.compensation_failed'::text
$function$;

-- any_running says whether one of the transactions open_transactions named
-- is still running.
CREATE OR REPLACE FUNCTION drainer.any_running(p_vxids text[])
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                    WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid::text = ANY (p_vxids))
$function$;

-- The audit names the caller, not the functions' owner: an operator
-- command's drainer.actor, "drainer" for the daemon's own connections
-- (application_name=drainer), anything else "db:<role>", the role the
-- session acts as (what current_user named before the functions below
-- became SECURITY DEFINER).
CREATE OR REPLACE FUNCTION drainer.audit_actor()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(nullif(current_setting('drainer.actor', true), ''),
                    CASE WHEN current_setting('application_name', true) = 'drainer' THEN 'drainer'
                         ELSE 'db:' || drainer.session_role() END)
$function$;

-- audit_anchor_generation anchors generation p_part, whose entries are
-- final (rotate_audit), and returns the anchor versions it wrote:
--
-- 1. the generation's entries that no ledger record holds yet go into one;
-- 2. its chains are verified (audit_chain_problems, each chain whole: it
--    may go on in a younger generation), and so are its ledger records:
--    entries that no longer digest as they did when recorded (rewritten,
--    hashes recomputed, or removed) are a finding of the record itself
--    (key 'ledger:N'), naming the chains in the buckets that differ;
-- 3. each chain with entries here gets a new anchor version (the one it
--    had moves to audit_anchor_history): the hash and id of its last entry
--    here, the last status and attempts it recorded (its last anchor's, if
--    none here records one), and the problems found in its chain. A chain
--    whose entries here an earlier anchor already stands for gets a
--    version only for a problem not recorded yet. A broken chain is never
--    anchored clean: the problem stays in the anchor, and verify reports it
--    after the entries are gone; the rotation never stalls on it;
-- 4. the new versions are digested into an 'anchors' record of the ledger.
--
-- With p_final (rotate_audit, right before the truncation, the partition
-- locked against writes) nothing is anchored anew: what was tampered with
-- since the anchoring is recorded, and an 'anchors' record written only
-- if there was something. The caller holds the ledger's lock. Caller's
-- rights (rotate_audit's, the owner's).
CREATE OR REPLACE FUNCTION drainer.audit_anchor_generation(p_part smallint, p_final boolean)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_epoch bigint;
    v_max   bigint;
    v_n     bigint;
    v_count bigint;
    v_b     integer;
    v_items bigint;
    v_vec   bytea;
    v_keys  text[] := '{}';
    v_probs text[] := '{}';
    r       record;
BEGIN
    SELECT a.epoch INTO v_epoch FROM drainer.audit_generations a WHERE a.part = p_part;
    SELECT coalesce(max(a.id), 0) INTO v_max FROM drainer.audit a WHERE a.part = p_part;
    PERFORM drainer.audit_ledger_entries(p_part, v_epoch, v_max);

    -- The ledger's records of this generation, digested again.
    FOR r IN SELECT l.* FROM drainer.audit_ledger l
              WHERE l.kind = 'entries' AND l.epoch = v_epoch ORDER BY l.n LOOP
        SELECT v.items, v.vector INTO v_items, v_vec
          FROM drainer.audit_entries_vector(p_part, r.from_id, r.upto_id, r.buckets) v;
        IF v_vec IS DISTINCT FROM r.vector OR v_items <> r.items THEN
            SELECT v_keys || ('ledger:' || r.n),
                   v_probs || format('ledger record %s: the entries of generation %s with ids %s to %s no longer matched what it recorded, in bucket(s) %s (chains there: %s): rewritten with their hashes recomputed, or removed',
                                     r.n, r.epoch, r.from_id + 1, r.upto_id, string_agg(b.b::text, ', ' ORDER BY b.b),
                                     coalesce((SELECT string_agg(c.key, ', ' ORDER BY c.key)
                                                 FROM (SELECT DISTINCT a.key FROM drainer.audit a
                                                        WHERE a.part = p_part AND a.id > r.from_id AND a.id <= r.upto_id
                                                          AND drainer.audit_bucket(a.key, r.buckets) = ANY (array_agg(b.b))
                                                        ORDER BY a.key LIMIT 20) c), 'none left'))
              INTO v_keys, v_probs
              FROM drainer.audit_vector_buckets(r.vector, v_vec) AS b(b);
        END IF;
    END LOOP;

    v_n := drainer.audit_ledger_next();
    WITH found AS (
        SELECT c.key, c.problem || format(' (entry %s)', c.id) AS problem
          FROM drainer.audit_chain_problems(NULL, p_part) c
        UNION
        SELECT f.key, f.problem FROM unnest(v_keys, v_probs) AS f(key, problem) WHERE f.key IS NOT NULL
    ), fresh AS (
        -- each problem recorded once, by the first anchor that finds it
        SELECT f.key, string_agg(f.problem, '; ' ORDER BY f.problem) AS problem
          FROM found f
         WHERE NOT EXISTS (SELECT 1 FROM (SELECT x.problem FROM drainer.audit_anchors x WHERE x.key = f.key
                                           UNION ALL
                                           SELECT h.problem FROM drainer.audit_anchor_history h WHERE h.key = f.key) o
                            WHERE position(f.problem IN o.problem) > 0)
         GROUP BY f.key
    ), last AS (
        SELECT DISTINCT ON (a.key) a.key, a.id, a.hash
          FROM drainer.audit a WHERE a.part = p_part ORDER BY a.key, a.id DESC
    ), st AS (
        SELECT DISTINCT ON (a.key) a.key, a.to_status, a.attempts
          FROM drainer.audit a WHERE a.part = p_part AND a.to_status IS NOT NULL ORDER BY a.key, a.id DESC
    ), chains AS (
        SELECT l.key FROM last l UNION SELECT f.key FROM fresh f
    ), new AS (
        SELECT nextval('drainer.audit_anchor_vid') AS vid, k.key,
               CASE WHEN m.advance THEN l.hash ELSE coalesce(x.hash, sha256(convert_to(k.key, 'UTF8'))) END AS hash,
               CASE WHEN m.advance THEN l.id ELSE x.last_id END AS last_id,
               CASE WHEN m.advance AND s.key IS NOT NULL THEN s.to_status ELSE x.status END AS status,
               CASE WHEN m.advance AND s.key IS NOT NULL THEN s.attempts ELSE x.attempts END AS attempts,
               f.problem
          FROM chains k
          LEFT JOIN last l ON l.key = k.key
          LEFT JOIN st s ON s.key = k.key
          LEFT JOIN fresh f ON f.key = k.key
          LEFT JOIN drainer.audit_anchors x ON x.key = k.key
         CROSS JOIN LATERAL (SELECT NOT p_final AND l.key IS NOT NULL AND (x.key IS NULL OR coalesce(x.last_id, 0) < l.id) AS advance) m
         WHERE m.advance OR f.problem IS NOT NULL
    ), moved AS (
        INSERT INTO drainer.audit_anchor_history (vid, key, hash, last_id, status, attempts, problem, record, row_hash, pruned_at)
        SELECT x.vid, x.key, x.hash, x.last_id, x.status, x.attempts, x.problem, x.record, x.row_hash, x.pruned_at
          FROM drainer.audit_anchors x JOIN new n ON n.key = x.key
    )
    INSERT INTO drainer.audit_anchors AS x (key, hash, pruned_at, vid, last_id, status, attempts, problem, record, row_hash)
    SELECT n.key, n.hash, now(), n.vid, n.last_id, n.status, n.attempts, n.problem, v_n,
           drainer.audit_anchor_hash(n.vid, n.key, n.hash, n.last_id, n.status, n.attempts, n.problem, v_n)
      FROM new n
    ON CONFLICT (key) DO UPDATE
       SET hash = excluded.hash, pruned_at = excluded.pruned_at, replaced = NULL, vid = excluded.vid,
           last_id = excluded.last_id, status = excluded.status, attempts = excluded.attempts,
           problem = excluded.problem, record = excluded.record, row_hash = excluded.row_hash;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF p_final AND v_count = 0 THEN
        RETURN 0;
    END IF;

    v_b := drainer.audit_buckets(v_count);
    SELECT v.items, v.vector INTO v_items, v_vec FROM drainer.audit_anchors_vector(v_n, v_b) v;
    PERFORM drainer.audit_ledger_append(v_n, 'anchors', v_epoch, p_part, NULL, v_max, v_items, v_b, v_vec);
    IF NOT p_final THEN
        UPDATE drainer.audit_generations
           SET anchored_to = v_max, anchor_record = v_n, wait_for = NULL, changed_at = now()
         WHERE part = p_part;
    END IF;
    RETURN v_count;
END
$function$;

-- audit_anchor_hash is the hash of one anchor version (audit_anchors,
-- audit_anchor_history): the ledger record that holds it (p_record)
-- digests these. Text that anyone could have written (the key, the status,
-- the problem) goes in by its own SHA-256, so no two versions read alike.
-- ops.AnchorHash computes the same in Go.
CREATE OR REPLACE FUNCTION drainer.audit_anchor_hash(p_vid bigint, p_key text, p_hash bytea, p_last_id bigint, p_status text, p_attempts integer, p_problem text, p_record bigint)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT sha256(convert_to(concat_ws(E'\x1f', 'anchor', p_vid::text,
        encode(sha256(convert_to(p_key, 'UTF8')), 'hex'), encode(p_hash, 'hex'), coalesce(p_last_id::text, ''),
        coalesce(encode(sha256(convert_to(p_status, 'UTF8')), 'hex'), ''), coalesce(p_attempts::text, ''),
        coalesce(encode(sha256(convert_to(p_problem, 'UTF8')), 'hex'), ''), p_record::text), 'UTF8'))
$function$;

-- audit_anchors_vector digests the anchor versions that ledger record
-- p_record holds, as audit_entries_vector digests entries: each version is
-- its vid (8 bytes) and row_hash, bucketed by key.
CREATE OR REPLACE FUNCTION drainer.audit_anchors_vector(p_record bigint, p_buckets integer)
 RETURNS TABLE(items bigint, vector bytea)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(sum(b.n), 0)::bigint,
           coalesce(string_agg(int4send(b.bucket) || b.digest, ''::bytea ORDER BY b.bucket), ''::bytea)
      FROM (SELECT drainer.audit_bucket(v.key, p_buckets) AS bucket, count(*) AS n,
                   sha256(string_agg(int8send(v.vid) || coalesce(v.row_hash, ''::bytea), ''::bytea ORDER BY v.vid)) AS digest
              FROM (SELECT x.vid, x.key, x.row_hash FROM drainer.audit_anchors x WHERE x.record = p_record
                    UNION ALL
                    SELECT h.vid, h.key, h.row_hash FROM drainer.audit_anchor_history h WHERE h.record = p_record) v
             GROUP BY 1) b
$function$;

-- audit_append records an action that changes no row's status (a pause, an
-- abort, a note) on the chain of key (e.g. 'route:charge_card', 'run:r1').
-- Entries on one key are serialised by an advisory lock on the key; on a
-- row's key (an operator's requeue that changes nothing else), by the
-- row's lock too, and the row's audit_head moves to the entry.
CREATE OR REPLACE FUNCTION drainer.audit_append(p_key text, p_event text, p_reason text)
 RETURNS bytea
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_prev  bytea;
    v_at    timestamptz := clock_timestamp();
    v_actor text := drainer.audit_actor();
    v_hash  bytea;
    v_seq   bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drainer.audit.' || p_key, 0));
    -- A row's key: the entry goes after the head the row carries, under
    -- the row's lock, and becomes its head (as every entry of a row does).
    SELECT q.seq, q.audit_head INTO v_seq, v_prev
      FROM drainer.intents i JOIN drainer.queue q ON q.seq = i.seq
     WHERE i.key = p_key
       FOR UPDATE OF q;
    v_prev := coalesce(v_prev, drainer.audit_head(p_key));
    v_hash := drainer.audit_hash(v_prev, p_key, v_at, p_event, NULL, NULL, NULL, NULL, v_actor, p_reason, NULL);
    INSERT INTO drainer.audit (key, at, event, actor, reason, prev_hash, hash)
    VALUES (p_key, v_at, p_event, v_actor, p_reason, v_prev, v_hash);
    IF v_seq IS NOT NULL THEN
        UPDATE drainer.queue SET audit_head = v_hash WHERE seq = v_seq;
    END IF;
    RETURN v_hash;
END
$function$;

-- audit_bucket is the bucket of p_buckets (a power of two) that key's
-- items fall into in a ledger record (audit_ledger): the first two bytes of
-- the key's SHA-256, modulo p_buckets. A digest per bucket tells which
-- chains a rewrite touched without the record holding one digest per chain.
CREATE OR REPLACE FUNCTION drainer.audit_bucket(p_key text, p_buckets integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT ('x' || left(encode(sha256(convert_to(p_key, 'UTF8')), 'hex'), 4))::bit(16)::integer % p_buckets
$function$;

-- audit_buckets is how many buckets a ledger record of p_items items
-- hashes them into: about four items a bucket, a power of two, at most
-- 4096 (so a record's vector, 36 bytes a bucket, stays under 150 kB).
CREATE OR REPLACE FUNCTION drainer.audit_buckets(p_items bigint)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT coalesce((SELECT min(1 << i) FROM generate_series(0, 11) AS i WHERE (1::bigint << i) * 4 >= p_items), 4096)
$function$;

-- audit_chain_problems returns the broken links of the chains of every key,
-- of p_key, or of the keys with entries in generation p_part (unordered),
-- with the generation of each entry: an entry whose prev_hash is not the
-- hash of the entry before it (an entry was deleted or inserted), or whose
-- hash does not match its content (it was edited). A chain's first
-- remaining entry links to the anchor that stands for the entries before
-- it: the latest anchor version (audit_anchors, audit_anchor_history) whose
-- last entry comes before it (one written before migration 022, which
-- names none, comes before every entry). And a change that was not
-- recorded: an entry whose from_status is not the to_status of the chain's
-- change before it (that entry's, or, for the first remaining one, the
-- anchor's that stands before it), a claim aside (pending to in_flight
-- writes no entry). So a status changed with the audit bypassed stays
-- evident after later changes of the row, its pruning and the
-- truncation of its entries, as does a forged entry that ends a chain.
-- audit_problems reads it, and rotate_audit before it anchors a
-- generation (what it finds is kept in the anchor for good).
--
-- The keys of generation p_part are a semi-join (hashed, batched to disk
-- when they outgrow work_mem), never a filter tested on each entry: that
-- filter, under an OR, searched its list of keys once per entry whenever
-- the list outgrew work_mem, so anchoring a generation of 200,000 entries
-- took hours; each entry is now read a bounded number of times
-- (TestAnchoringReadsEachEntryBoundedTimes).
CREATE OR REPLACE FUNCTION drainer.audit_chain_problems(p_key text, p_part smallint)
 RETURNS TABLE(id bigint, key text, part smallint, problem text)
 LANGUAGE sql
 STABLE
AS $function$
    WITH entries AS NOT MATERIALIZED (
        SELECT a.* FROM drainer.audit a
         WHERE p_part IS NULL AND (p_key IS NULL OR a.key = p_key)
        UNION ALL
        SELECT a.* FROM drainer.audit a
         WHERE p_part IS NOT NULL AND (p_key IS NULL OR a.key = p_key)
           AND a.key IN (SELECT e.key FROM drainer.audit e WHERE e.part = p_part)
    )
    , chain AS (
        SELECT a.*, CASE WHEN lag(a.id) OVER w IS NOT NULL THEN lag(a.hash) OVER w
                         ELSE (SELECT v.hash
                                 FROM (SELECT x.hash, x.last_id, x.vid FROM drainer.audit_anchors x WHERE x.key = a.key
                                       UNION ALL
                                       SELECT h.hash, h.last_id, h.vid FROM drainer.audit_anchor_history h WHERE h.key = a.key) v
                                WHERE coalesce(v.last_id, 0) < a.id
                                ORDER BY coalesce(v.last_id, 0) DESC, v.vid DESC LIMIT 1)
                    END AS expected_prev
          FROM entries a
        WINDOW w AS (PARTITION BY a.key ORDER BY a.id)
    )
    , status_chain AS (
        SELECT a.id, a.key, a.part, a.from_status,
               CASE WHEN lag(a.id) OVER w IS NOT NULL THEN lag(a.to_status) OVER w
                    ELSE (SELECT v.status
                            FROM (SELECT x.status, x.last_id, x.vid FROM drainer.audit_anchors x WHERE x.key = a.key
                                  UNION ALL
                                  SELECT h.status, h.last_id, h.vid FROM drainer.audit_anchor_history h WHERE h.key = a.key) v
                           WHERE coalesce(v.last_id, 0) < a.id
                           ORDER BY coalesce(v.last_id, 0) DESC, v.vid DESC LIMIT 1)
               END AS prev_status
          FROM entries a
         WHERE a.to_status IS NOT NULL
        WINDOW w AS (PARTITION BY a.key ORDER BY a.id)
    )
    SELECT s.id, s.key, s.part,
           format('the entry records a change from %s, but the change before it ended in %s (a change was not recorded)',
                  s.from_status, s.prev_status)
      FROM status_chain s
     WHERE s.from_status IS NOT NULL AND s.prev_status IS NOT NULL
       AND s.from_status IS DISTINCT FROM s.prev_status
       AND NOT (s.prev_status = 'pending' AND s.from_status = 'in_flight')
    UNION ALL
    SELECT c.id, c.key, c.part,
           CASE WHEN c.hash IS DISTINCT FROM drainer.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
                      c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
                THEN 'entry content does not match its hash (edited)'
                ELSE 'prev_hash does not match the previous entry of this key (an entry was removed or inserted)'
           END
      FROM chain c
     WHERE c.hash IS DISTINCT FROM drainer.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
                 c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
        OR c.prev_hash IS DISTINCT FROM c.expected_prev
$function$;

-- audit_change records a change of a queue row's status or attempts made
-- by a statement that did not record it itself: an operator's command, a
-- reclaim, a hand-back, a write through drainer.outbox, or another role
-- editing the table. The engine's completion (store.Complete) appends its
-- entries in its own statement and moves audit_head itself, so the
-- trigger's condition (triggers/queue_audit_update.sql) is false for it and
-- this function never runs on the drain's path. The entry is appended
-- under the row's lock, after the row's head (or, where the row carries
-- none yet, the key's last entry), and the row's head moves to it.
--
-- An entry records what happened, never an earlier answer: its
-- response_status is the provider's status only when it records the answer
-- to a request actually sent (drainer.answer = 'on'); the daemon's note
-- (drainer.note) is the reason of an entry that ends a claim when no
-- operator reason (drainer.reason) is set.
CREATE OR REPLACE FUNCTION drainer.audit_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_key    text;
    v_at     timestamptz := clock_timestamp();
    v_actor  text := drainer.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_event  text := drainer.audit_event(OLD.status, NEW.status);
    v_resp   integer;
    v_detail bytea;
    v_prev   bytea;
BEGIN
    SELECT i.key INTO v_key FROM drainer.intents i WHERE i.seq = NEW.seq;
    IF coalesce(current_setting('drainer.answer', true) = 'on', false) AND OLD.status = 'in_flight' THEN
        v_resp := NEW.response_status;
    END IF;
    IF v_reason IS NULL AND OLD.status = 'in_flight' THEN
        v_reason := nullif(current_setting('drainer.note', true), '');
    END IF;
    IF NEW.last_error IS DISTINCT FROM OLD.last_error AND NEW.last_error IS NOT NULL THEN
        v_detail := sha256(convert_to(NEW.last_error, 'UTF8'));
    END IF;
    v_prev := coalesce(OLD.audit_head, drainer.audit_head(v_key));
    NEW.audit_head := drainer.audit_hash(v_prev, v_key, v_at, v_event, OLD.status, NEW.status, NEW.attempts,
                                            v_resp, v_actor, v_reason, v_detail);
    INSERT INTO drainer.audit (key, at, event, from_status, to_status, attempts, response_status,
                                   actor, reason, detail_sha256, prev_hash, hash)
    VALUES (v_key, v_at, v_event, OLD.status, NEW.status, NEW.attempts, v_resp,
            v_actor, v_reason, v_detail, v_prev, NEW.audit_head);
    RETURN NEW;
END
$function$;

-- audit_entries_vector digests the entries of generation p_part whose ids
-- are in (p_from, p_upto], as an 'entries' record of the ledger holds them
-- (audit_ledger): each entry is its id (8 bytes) and hash, each bucket of
-- keys (audit_bucket) the SHA-256 of its entries in id order, and the
-- vector each non-empty bucket's number (4 bytes) and digest, in order.
-- Equal vectors mean the same entries with the same hashes, and an entry's
-- hash covers its content and the entry before it.
CREATE OR REPLACE FUNCTION drainer.audit_entries_vector(p_part smallint, p_from bigint, p_upto bigint, p_buckets integer)
 RETURNS TABLE(items bigint, vector bytea)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(sum(b.n), 0)::bigint,
           coalesce(string_agg(int4send(b.bucket) || b.digest, ''::bytea ORDER BY b.bucket), ''::bytea)
      FROM (SELECT drainer.audit_bucket(a.key, p_buckets) AS bucket, count(*) AS n,
                   sha256(string_agg(int8send(a.id) || a.hash, ''::bytea ORDER BY a.id)) AS digest
              FROM drainer.audit a
             WHERE a.part = p_part AND a.id > p_from AND a.id <= p_upto
             GROUP BY 1) b
$function$;

-- audit_event names a status change.
CREATE OR REPLACE FUNCTION drainer.audit_event(from_status text, to_status text)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(nullif(current_setting('drainer.action', true), ''),
        CASE
            WHEN from_status IS NULL THEN 'enqueued'
            WHEN to_status = 'in_flight' THEN 'claimed'
            WHEN from_status = 'in_flight' AND to_status = 'pending' THEN 'rescheduled'
            ELSE to_status
        END)
$function$;

-- audit_generation is the default of audit.part: the generation new
-- entries go to (audit_generations, rotate_audit). It runs with the
-- owner's rights, so whoever may insert into audit need not read
-- audit_generations; it is not PUBLIC's: code/grants.sql grants it to the
-- roles that may insert into audit (drainer's own writers run as the
-- owner).
CREATE OR REPLACE FUNCTION drainer.audit_generation()
 RETURNS smallint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$ SELECT part FROM drainer.audit_generations WHERE current $function$;

-- audit_hash is the chain function, shared by writers and the verifier.
CREATE OR REPLACE FUNCTION drainer.audit_hash(prev bytea, key text, at timestamp with time zone, event text, from_status text, to_status text, attempts integer, response_status integer, actor text, reason text, detail bytea)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    SELECT sha256(coalesce($1, ''::bytea) || convert_to(concat_ws(E'\x1f',
        $2, (extract(epoch FROM $3) * 1000000)::bigint::text, $4, coalesce($5, ''), coalesce($6, ''),
        coalesce($7::text, ''), coalesce($8::text, ''), $9, coalesce($10, ''),
        coalesce(encode($11, 'hex'), '')), 'UTF8'))
$function$;

-- audit_horizon returns the largest entry id handed out so far, and the
-- transactions running now (open_transactions): once none of them runs,
-- every entry with an id up to it is written for good, or never will be
-- (ids come from one sequence, in order; a writer takes its id inside its
-- transaction). `drainer audit checkpoint` waits for them
-- (store.AuditHorizon) before it extends the ledger that far. The
-- sequence is read first: a transaction that takes an id before that read
-- is running at the second, or done. Owner's rights (the sequence is not
-- the runtime role's); granted with audit_ledger_extend.
CREATE OR REPLACE FUNCTION drainer.audit_horizon(OUT upto bigint, OUT wait_for text[])
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END INTO upto FROM drainer.audit_entry_id s;
    wait_for := drainer.open_transactions();
END
$function$;

-- audit_ledger_append appends record p_n to the ledger (audit_ledger), which
-- must be the next one: its digest is the vector's SHA-256, its prev the
-- hash of the record before it. The ledger's lock (taken here, held by the
-- caller's transaction) keeps its records in one chain. It runs with its
-- caller's rights: rotate_audit and audit_ledger_extend, as the owner.
CREATE OR REPLACE FUNCTION drainer.audit_ledger_append(p_n bigint, p_kind text, p_epoch bigint, p_part smallint, p_from bigint, p_upto bigint, p_items bigint, p_buckets integer, p_vector bytea)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_last   bigint;
    v_prev   bytea;
    v_at     timestamptz := clock_timestamp();
    v_digest bytea := sha256(p_vector);
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drainer.audit_ledger', 0));
    SELECT l.n, l.hash INTO v_last, v_prev FROM drainer.audit_ledger l ORDER BY l.n DESC LIMIT 1;
    IF p_n IS DISTINCT FROM coalesce(v_last, 0) + 1 THEN
        RAISE EXCEPTION USING ERRCODE = '40001',
            MESSAGE = format('drainer.audit_ledger_append: record %s is not the next one (the ledger ends at %s)', p_n, v_last);
    END IF;
    INSERT INTO drainer.audit_ledger (n, kind, epoch, part, from_id, upto_id, items, buckets, digest, vector, at, prev, hash)
    VALUES (p_n, p_kind, p_epoch, p_part, p_from, p_upto, p_items, p_buckets, v_digest, p_vector, v_at, v_prev,
            drainer.audit_ledger_hash(v_prev, p_n, p_kind, p_epoch, p_part, p_from, p_upto, p_items, p_buckets,
                                          v_digest, v_at));
    RETURN p_n;
END
$function$;

-- audit_ledger_entries appends to the ledger the entries of generation
-- p_part (epoch p_epoch) that no record holds yet, up to id p_upto, as one
-- 'entries' record (none when there are none), and returns the number of
-- entries it holds. The caller makes sure that every entry with an id up
-- to p_upto is written for good (rotate_audit: the generation is final;
-- audit_ledger_extend: audit_horizon). Caller's rights.
CREATE OR REPLACE FUNCTION drainer.audit_ledger_entries(p_part smallint, p_epoch bigint, p_upto bigint)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_n     bigint := drainer.audit_ledger_next();
    v_from  bigint;
    v_count bigint;
    v_b     integer;
    v_items bigint;
    v_vec   bytea;
BEGIN
    SELECT coalesce(max(l.upto_id), 0) INTO v_from
      FROM drainer.audit_ledger l WHERE l.kind = 'entries' AND l.epoch = p_epoch;
    IF p_upto IS NULL OR p_upto <= v_from THEN
        RETURN 0;
    END IF;
    SELECT count(*) INTO v_count FROM drainer.audit a WHERE a.part = p_part AND a.id > v_from AND a.id <= p_upto;
    IF v_count = 0 THEN
        RETURN 0;
    END IF;
    v_b := drainer.audit_buckets(v_count);
    SELECT v.items, v.vector INTO v_items, v_vec FROM drainer.audit_entries_vector(p_part, v_from, p_upto, v_b) v;
    PERFORM drainer.audit_ledger_append(v_n, 'entries', p_epoch, p_part, v_from, p_upto, v_items, v_b, v_vec);
    RETURN v_items;
END
$function$;

-- audit_ledger_extend appends to the ledger every entry with an id up to
-- p_upto that no record holds yet, one 'entries' record a generation, and
-- returns the ledger's last record: what a checkpoint signs. p_upto comes
-- from audit_horizon, whose transactions have ended (store.ExtendAuditLedger
-- makes sure). A rotation step that anchors or truncates holds the
-- ledger's lock; this waits for it. Owner's rights: nobody else writes the
-- ledger; code/grants.sql grants it to the roles that read the audit.
CREATE OR REPLACE FUNCTION drainer.audit_ledger_extend(p_upto bigint, OUT n bigint, OUT hash bytea)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
DECLARE
    g record;
BEGIN
    IF p_upto IS NULL OR p_upto > (SELECT s.last_value FROM drainer.audit_entry_id s) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.audit_ledger_extend: no entry id %s was handed out yet (take it from audit_horizon)', p_upto);
    END IF;
    FOR g IN SELECT a.part, a.epoch FROM drainer.audit_generations a
              WHERE NOT a.ready AND a.epoch IS NOT NULL ORDER BY a.epoch LOOP
        PERFORM drainer.audit_ledger_entries(g.part, g.epoch, p_upto);
    END LOOP;
    SELECT l.n, l.hash INTO n, hash FROM drainer.audit_ledger l ORDER BY l.n DESC LIMIT 1;
END
$function$;

-- audit_ledger_hash is the ledger's chain function: a record's hash covers
-- the record before it (p_prev) and every field but its vector, whose
-- digest it covers. `drainer audit verify --checkpoints` computes the same
-- in Go (ops.LedgerHash).
CREATE OR REPLACE FUNCTION drainer.audit_ledger_hash(p_prev bytea, p_n bigint, p_kind text, p_epoch bigint, p_part smallint, p_from bigint, p_upto bigint, p_items bigint, p_buckets integer, p_digest bytea, p_at timestamp with time zone)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT sha256(coalesce(p_prev, ''::bytea) || convert_to(concat_ws(E'\x1f', 'ledger',
        p_n::text, p_kind, coalesce(p_epoch::text, ''), coalesce(p_part::text, ''), coalesce(p_from::text, ''),
        coalesce(p_upto::text, ''), p_items::text, p_buckets::text, coalesce(encode(p_digest, 'hex'), ''),
        (extract(epoch FROM p_at) * 1000000)::bigint::text), 'UTF8'))
$function$;

-- audit_ledger_next takes the ledger's lock for the caller's transaction
-- and returns the number its next record gets (audit_ledger_append), so
-- that the anchors a record holds can name it before it is written.
CREATE OR REPLACE FUNCTION drainer.audit_ledger_next()
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drainer.audit_ledger', 0));
    RETURN coalesce((SELECT max(l.n) FROM drainer.audit_ledger l), 0) + 1;
END
$function$;

-- audit_ledger_problems checks the ledger (audit_ledger) and returns its
-- problems, each with the record's number as id and, where a chain is to
-- blame, its key (else 'ledger'):
--
-- - the chain: records numbered from 1 without a gap, each linking to the
--   one before it, each matching its hash (and its vector its digest);
-- - an 'entries' record of a generation still there: the entries it
--   recorded, digested again, match it; where they do not, the chains
--   with entries in the buckets that differ are named. A generation that
--   is gone must have been truncated (a 'truncated' record), or be
--   anchored and empty (its truncation underway);
-- - an 'anchors' record: the anchor versions it holds, digested again,
--   match it; every version that names a record is held by one.
--
-- A rewrite that recomputed every hash, the ledger's included, passes
-- here: a signed checkpoint catches it (`drainer audit verify
-- --checkpoints`).
CREATE OR REPLACE FUNCTION drainer.audit_ledger_problems()
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
AS $function$
DECLARE
    r       record;
    v_prev  bytea;
    v_last  bigint := 0;
    v_items bigint;
    v_vec   bytea;
    v_live  boolean;
BEGIN
    FOR r IN SELECT l.* FROM drainer.audit_ledger l ORDER BY l.n LOOP
        IF r.n <> v_last + 1 THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s follows record %s (records were removed)', r.n, v_last);
        END IF;
        IF r.prev IS DISTINCT FROM v_prev THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s does not link to the record before it (a record was removed, inserted or rewritten)', r.n);
        END IF;
        IF r.hash IS DISTINCT FROM drainer.audit_ledger_hash(r.prev, r.n, r.kind, r.epoch, r.part, r.from_id, r.upto_id,
                                                                 r.items, r.buckets, r.digest, r.at)
           OR (r.vector IS NOT NULL AND sha256(r.vector) IS DISTINCT FROM r.digest) THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s does not match its hash (edited)', r.n);
        END IF;
        v_prev := r.hash;
        v_last := r.n;
        IF r.kind = 'entries' THEN
            v_live := EXISTS (SELECT 1 FROM drainer.audit_generations g
                               WHERE g.epoch = r.epoch AND g.part = r.part AND NOT g.ready);
            -- An anchored generation whose entries are gone is being
            -- truncated (a snapshot from before the truncation sees its
            -- partition empty): its anchors stand for what was verified.
            IF v_live AND NOT EXISTS (SELECT 1 FROM drainer.audit a WHERE a.part = r.part)
               AND EXISTS (SELECT 1 FROM drainer.audit_ledger t
                            WHERE t.kind = 'anchors' AND t.epoch = r.epoch AND t.n > r.n AND t.upto_id >= r.upto_id) THEN
                CONTINUE;
            END IF;
            IF v_live THEN
                SELECT v.items, v.vector INTO v_items, v_vec
                  FROM drainer.audit_entries_vector(r.part, r.from_id, r.upto_id, r.buckets) v;
                IF v_vec IS DISTINCT FROM r.vector OR v_items <> r.items THEN
                    RETURN QUERY
                    SELECT r.n, coalesce(k.key, 'ledger'),
                           format('ledger record %s: the entries of generation %s (ids %s to %s) in bucket %s no longer match what it recorded (%s)',
                                  r.n, r.epoch, r.from_id + 1, r.upto_id, b.b,
                                  CASE WHEN k.key IS NULL THEN 'removed'
                                       ELSE 'this chain''s, or another''s in the bucket, rewritten with hashes recomputed, or removed' END)
                      FROM drainer.audit_vector_buckets(r.vector, v_vec) AS b(b)
                      LEFT JOIN LATERAL (
                          SELECT DISTINCT a.key FROM drainer.audit a
                           WHERE a.part = r.part AND a.id > r.from_id AND a.id <= r.upto_id
                             AND drainer.audit_bucket(a.key, r.buckets) = b.b) k ON true;
                END IF;
            ELSIF NOT EXISTS (SELECT 1 FROM drainer.audit_ledger t
                               WHERE t.kind = 'truncated' AND t.epoch = r.epoch AND t.n > r.n) THEN
                RETURN QUERY SELECT r.n, 'ledger'::text,
                    format('ledger record %s: generation %s holds its entries no more, and was not truncated by the rotation', r.n, r.epoch);
            END IF;
        ELSIF r.kind = 'anchors' THEN
            SELECT v.items, v.vector INTO v_items, v_vec FROM drainer.audit_anchors_vector(r.n, r.buckets) v;
            IF v_vec IS DISTINCT FROM r.vector OR v_items <> r.items THEN
                RETURN QUERY
                SELECT r.n, coalesce(k.key, 'ledger'),
                       format('ledger record %s: the anchors it recorded in bucket %s no longer match (%s)', r.n, b.b,
                              CASE WHEN k.key IS NULL THEN 'removed' ELSE 'this chain''s or another''s in the bucket was rewritten or removed' END)
                  FROM drainer.audit_vector_buckets(r.vector, v_vec) AS b(b)
                  LEFT JOIN LATERAL (
                      SELECT DISTINCT v.key
                        FROM (SELECT x.key FROM drainer.audit_anchors x WHERE x.record = r.n
                              UNION ALL
                              SELECT h.key FROM drainer.audit_anchor_history h WHERE h.record = r.n) v
                       WHERE drainer.audit_bucket(v.key, r.buckets) = b.b) k ON true;
            END IF;
        ELSIF EXISTS (SELECT 1 FROM drainer.audit_generations g
                       WHERE g.epoch = r.epoch AND g.part = r.part AND NOT g.ready) THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s says generation %s was truncated, but it is still there', r.n, r.epoch);
        END IF;
    END LOOP;
    -- Anchor versions that name a record the ledger does not hold (the
    -- ledger's end was cut off, or the anchor was written by hand).
    RETURN QUERY
    SELECT max(v.record), v.key, format('anchor of %s names ledger record %s, which the ledger does not hold', v.key, v.record)
      FROM (SELECT x.key, x.record FROM drainer.audit_anchors x
             UNION ALL
            SELECT h.key, h.record FROM drainer.audit_anchor_history h) v
     WHERE v.record IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM drainer.audit_ledger l WHERE l.n = v.record AND l.kind = 'anchors')
     GROUP BY v.key, v.record;
    -- Each chain's current anchor is its latest version.
    RETURN QUERY
    SELECT h.vid, h.key, format('the anchor of %s is not its latest version %s (anchors were swapped)', h.key, h.vid)
      FROM drainer.audit_anchor_history h
      JOIN drainer.audit_anchors x ON x.key = h.key
     WHERE h.vid > x.vid;
END
$function$;

-- audit_problems checks the chains, of every key or of p_key, and returns
-- their problems (unordered):
--
-- - broken links (audit_chain_problems): an entry edited, removed or
--   inserted;
-- - every queue row must stand where its chain ends: its audit_head the
--   chain's last hash, its status and attempts those of the last entry
--   that records a status (an in_flight row's last entry is the pending it
--   was claimed from, one attempt fewer, or as many when the claim counted
--   none: its tool had no route at the claimer), or, once those entries are
--   truncated, those its anchor kept; a pruned key's tombstone its
--   chain's last hash and status, and a chain (entries, or an anchor). So deleting
--   a chain's last entry, or its anchor, or a change made with the audit
--   bypassed, is caught, before and after rotation;
-- - what the rotation found wrong in the entries it anchored (an anchor
--   keeps it: rotate_audit), and an anchor version whose content no longer
--   matches its hash.
--
-- audit_verify (every chain, and the ledger, without JIT) and the console
-- (one key) read it; it stays a plain SQL function, so that either inlines
-- it and plans it for the key it gives.
CREATE OR REPLACE FUNCTION drainer.audit_problems(p_key text)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT c.id, c.key, c.problem FROM drainer.audit_chain_problems(p_key, NULL) c
    UNION ALL
    -- every row's state is its chain's last entry, or its anchor's (a
    -- claim writes no entry: an in_flight row's last entry is the pending
    -- it came from)
    SELECT coalesce(h.id, x.last_id, 0), i.key,
           CASE WHEN q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash)
                THEN 'the row''s audit head is not its chain''s last entry (an entry was removed)'
                WHEN q.status IS DISTINCT FROM s.status AND NOT (q.status = 'in_flight' AND s.status = 'pending')
                THEN format('the row is %s but its chain''s last change records %s (a change was not recorded)',
                            q.status, s.status)
                ELSE format('the row has %s attempts but its chain''s last change records %s (a change was not recorded)',
                            q.attempts, s.attempts)
           END
      FROM drainer.queue q
      JOIN drainer.intents i ON i.seq = q.seq
      -- the key's entries read once (through the per-key index, no order
      -- by the id index: see audit_head.sql): its last entry, and its last
      -- entry that records a status (an operator's note on the row,
      -- audit_append, records none)
     CROSS JOIN LATERAL (SELECT max(a.id) AS id, (array_agg(a.hash ORDER BY a.id DESC))[1] AS hash,
                                max(a.id) FILTER (WHERE a.to_status IS NOT NULL) AS status_id,
                                (array_agg(a.to_status ORDER BY a.id DESC) FILTER (WHERE a.to_status IS NOT NULL))[1] AS to_status,
                                (array_agg(a.attempts ORDER BY a.id DESC) FILTER (WHERE a.to_status IS NOT NULL))[1] AS attempts
                           FROM drainer.audit a WHERE a.key = i.key) h
      LEFT JOIN drainer.audit_anchors x ON x.key = i.key
     CROSS JOIN LATERAL (SELECT CASE WHEN h.status_id IS NOT NULL THEN h.to_status ELSE x.status END AS status,
                                CASE WHEN h.status_id IS NOT NULL THEN h.attempts ELSE x.attempts END AS attempts) s
     WHERE (p_key IS NULL OR i.key = p_key)
       AND ((q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash))
            OR (s.status IS NOT NULL AND q.status IS DISTINCT FROM s.status
                AND NOT (q.status = 'in_flight' AND s.status = 'pending'))
            -- an in_flight row has one attempt more than the pending it
            -- was claimed from, or as many when its claimer had no route
            -- for it and counted none (store.Claim.Routed)
            OR (s.status IS NOT NULL AND s.attempts IS NOT NULL
                AND q.attempts IS DISTINCT FROM s.attempts
                AND NOT (q.status = 'in_flight' AND s.status = 'pending' AND q.attempts = s.attempts + 1)))
    UNION ALL
    -- a pruned row's tombstone keeps the status it was pruned in and its
    -- chain's head (a tombstone without a head, of a row that had none, is
    -- checked by its status alone), and its chain stays (entries, or their
    -- anchor) and ends there
    SELECT coalesce(h.id, x.last_id, 0), k.key,
           CASE WHEN h.id IS NULL AND x.key IS NULL
                THEN 'the pruned key''s chain is gone: no entry, no anchor (its anchor was removed)'
                WHEN k.audit_head IS NOT NULL AND k.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash)
                THEN 'the pruned key''s audit head is not its chain''s last entry (an entry was inserted or removed after it was pruned)'
                ELSE format('the key was pruned %s but its chain''s last change records %s (a change was not recorded)',
                            k.final_status, s.status)
           END
      FROM drainer.keys k
     CROSS JOIN LATERAL (SELECT max(a.id) AS id, (array_agg(a.hash ORDER BY a.id DESC))[1] AS hash,
                                max(a.id) FILTER (WHERE a.to_status IS NOT NULL) AS status_id,
                                (array_agg(a.to_status ORDER BY a.id DESC) FILTER (WHERE a.to_status IS NOT NULL))[1] AS to_status
                           FROM drainer.audit a WHERE a.key = k.key) h
      LEFT JOIN drainer.audit_anchors x ON x.key = k.key
     CROSS JOIN LATERAL (SELECT CASE WHEN h.status_id IS NOT NULL THEN h.to_status ELSE x.status END AS status) s
     WHERE k.pruned_at IS NOT NULL AND (p_key IS NULL OR k.key = p_key)
       AND NOT EXISTS (SELECT 1 FROM drainer.intents i WHERE i.key = k.key)
       AND ((h.id IS NULL AND x.key IS NULL)
            OR (k.audit_head IS NOT NULL AND k.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash))
            OR (s.status IS NOT NULL AND k.final_status IS DISTINCT FROM s.status))
    UNION ALL
    -- the anchors: what they were found to stand for, and their content
    SELECT coalesce(v.last_id, 0), v.key,
           CASE WHEN v.record IS NOT NULL
                 AND v.row_hash IS DISTINCT FROM drainer.audit_anchor_hash(v.vid, v.key, v.hash, v.last_id, v.status,
                                                                        v.attempts, v.problem, v.record)
                THEN format('anchor %s does not match its hash (edited)', v.vid)
                -- a ledger record's own finding (rotate_audit): it names the
                -- chains it may be about
                WHEN v.key LIKE 'ledger:%' THEN v.problem
                ELSE 'the entries this anchor stands for were found broken when anchored: ' || v.problem
           END
      FROM (SELECT x.vid, x.key, x.hash, x.last_id, x.status, x.attempts, x.problem, x.record, x.row_hash
              FROM drainer.audit_anchors x
             UNION ALL
            SELECT h.vid, h.key, h.hash, h.last_id, h.status, h.attempts, h.problem, h.record, h.row_hash
              FROM drainer.audit_anchor_history h) v
     WHERE (p_key IS NULL OR v.key = p_key)
       AND (v.problem IS NOT NULL
            OR (v.record IS NOT NULL
                AND v.row_hash IS DISTINCT FROM drainer.audit_anchor_hash(v.vid, v.key, v.hash, v.last_id, v.status,
                                                                       v.attempts, v.problem, v.record)))
$function$;

-- audit_head is the hash a key's next entry links to: its latest entry, or
-- the anchor left when retention pruned the chain's older entries.
--
-- PL/pgSQL, not SQL: a SQL function whose body holds a subquery is never
-- inlined, so each statement that calls it parses and plans its body
-- again, and a single enqueue (one call per transaction) paid that on
-- every call; PL/pgSQL keeps the plan for the session. Statements that
-- need the head of many keys at once (enqueue_batch) read it inline, with
-- the same two look-ups, planned once for all their rows.
--
-- "ORDER BY a.id + 0": the latest entry is found among the key's own
-- entries (the per-key hash index), never by reading the id index
-- backwards until an entry of the key turns up. The planner takes that
-- second way when it expects many entries per key, as it does for a
-- generation not yet analyzed (the default selectivity of an equality):
-- it then read the whole generation for a key that has no entry (every
-- enqueue of a new key), and `audit verify` read as many entries for each
-- row of the queue (TestAuditKeyLookupsReadOneKey). Every look-up of a
-- key's latest entry is written so (enqueue_batch), or aggregates the
-- key's entries in id order, which reads them through the same index
-- (audit_problems, the retention of tombstones).
CREATE OR REPLACE FUNCTION drainer.audit_head(p_key text)
 RETURNS bytea
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN coalesce((SELECT a.hash FROM drainer.audit a WHERE a.key = p_key ORDER BY a.id + 0 DESC LIMIT 1),
                    (SELECT x.hash FROM drainer.audit_anchors x WHERE x.key = p_key));
END
$function$;

-- audit_rows appends the first entry of a row's hash chain for an insert
-- into queue that did not append it itself, before the row is written,
-- and sets the row's audit_head to it (the trigger queue_audit_insert
-- runs it only for a row inserted without a head). The enqueue functions
-- append their rows' first entries themselves; saga compensation rows,
-- alert rows, writes through drainer.outbox and other roles' inserts come
-- here. The chain's head is looked up (a key enqueued again after its rows
-- were pruned continues its chain).
CREATE OR REPLACE FUNCTION drainer.audit_rows()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_key    text;
    v_hash   bytea;
    v_at     timestamptz := clock_timestamp();
    v_actor  text := drainer.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_event  text := drainer.audit_event(NULL, NEW.status);
    v_prev   bytea;
BEGIN
    SELECT i.key, i.payload_hash INTO v_key, v_hash FROM drainer.intents i WHERE i.seq = NEW.seq;
    v_prev := drainer.audit_head(v_key);
    NEW.audit_head := drainer.audit_hash(v_prev, v_key, v_at, v_event, NULL, NEW.status, NEW.attempts,
                                            NEW.response_status, v_actor, v_reason, v_hash);
    INSERT INTO drainer.audit (key, at, event, from_status, to_status, attempts, response_status,
                                   actor, reason, detail_sha256, prev_hash, hash)
    VALUES (v_key, v_at, v_event, NULL, NEW.status, NEW.attempts, NEW.response_status,
            v_actor, v_reason, v_hash, v_prev, NEW.audit_head);
    RETURN NEW;
END
$function$;

-- audit_vector_buckets names the buckets in which two vectors of a ledger
-- record (audit_entries_vector, audit_anchors_vector) differ: a bucket
-- digested differently, or present in one only.
CREATE OR REPLACE FUNCTION drainer.audit_vector_buckets(p_recorded bytea, p_now bytea)
 RETURNS SETOF integer
 LANGUAGE sql
 IMMUTABLE
AS $function$
    WITH r AS (SELECT ('x' || encode(substring(p_recorded FROM i * 36 + 1 FOR 4), 'hex'))::bit(32)::integer AS b,
                      substring(p_recorded FROM i * 36 + 5 FOR 32) AS d
                 FROM generate_series(0, length(p_recorded) / 36 - 1) AS i),
         n AS (SELECT ('x' || encode(substring(p_now FROM i * 36 + 1 FOR 4), 'hex'))::bit(32)::integer AS b,
                      substring(p_now FROM i * 36 + 5 FOR 32) AS d
                 FROM generate_series(0, length(p_now) / 36 - 1) AS i)
    SELECT coalesce(r.b, n.b) FROM r FULL JOIN n ON n.b = r.b WHERE r.d IS DISTINCT FROM n.d
$function$;

-- audit_verify checks every chain (audit_problems) and the ledger that
-- chains the audit's records and anchors (audit_ledger_problems), and
-- returns their problems, the chains' first, each by id, at most p_limit.
-- Without JIT: the plan of a whole-audit check is costed far above the
-- JIT thresholds, and compiling it took longer than running it.
CREATE OR REPLACE FUNCTION drainer.audit_verify(p_limit integer DEFAULT 100)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
 SET jit TO 'off'
AS $function$
    SELECT p.id, p.key, p.problem
      FROM (SELECT 0 AS o, c.id, c.key, c.problem FROM drainer.audit_problems(NULL) c
            UNION ALL
            SELECT 1, l.id, l.key, l.problem FROM drainer.audit_ledger_problems() l) p
     ORDER BY p.o, p.id, p.key, p.problem
     LIMIT p_limit
$function$;

-- canonical_payload is payload as a JSON value: numbers with their
-- trailing fractional zeros trimmed. Equal JSON values have equal canonical
-- text. (Numbers are compared exactly as decimals: two numbers that differ
-- past a double's precision stay different.) Its text is canonical_text's,
-- which the payload hash is taken over.
CREATE OR REPLACE FUNCTION drainer.canonical_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT drainer.canonical_text(payload::text)::jsonb
$function$;

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
CREATE OR REPLACE FUNCTION drainer.canonical_text(payload_text text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT regexp_replace(payload_text, '("(?:[^"\\]|\\.)*")|(\.[0-9]*[1-9])0+\M|\.0+\M', '\1\2', 'g')
$function$;

-- canonical_tuple and idempotency_key reproduce idemkey.Tuple.Canonical and
-- .Key byte for byte: to_json(text) escapes exactly as RFC 8785 does.
CREATE OR REPLACE FUNCTION drainer.canonical_tuple(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT '{"agent_run_id":' || to_json($1)::text
        || ',"business_scope":' || to_json($4)::text
        || ',"step_id":' || to_json($2)::text
        || ',"tool_name":' || to_json($3)::text || '}'
$function$;

-- check_tuple raises 22023 naming every invalid field of a tuple.
CREATE OR REPLACE FUNCTION drainer.check_tuple(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    problems text[] := '{}';
    names    text[] := ARRAY['agent_run_id', 'step_id', 'tool_name', 'business_scope'];
    vals     text[] := ARRAY[agent_run_id, step_id, tool_name, business_scope];
BEGIN
    FOR i IN 1..4 LOOP
        IF vals[i] IS NULL THEN
            problems := problems || (names[i] || ' must not be null');
        ELSIF i < 4 AND vals[i] = '' THEN
            problems := problems || (names[i] || ' must not be empty');
        ELSIF octet_length(vals[i]) > 1024 THEN
            problems := problems || format('%s is %s bytes, more than the limit of 1024', names[i], octet_length(vals[i]));
        END IF;
    END LOOP;
    IF cardinality(problems) > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'drainer.enqueue: invalid intent tuple: ' || array_to_string(problems, '; ');
    END IF;
END
$function$;

-- complete_rows writes a batch of completions (store.Complete) and their
-- audit entries, in one statement, with the owner's rights: the daemon's
-- role appends audit entries only through it, for the changes it makes.
-- Arguments are parallel arrays, one element per row: seq, lease token,
-- new status, attempt given back (1/0), delay in ms (-1: keep
-- next_attempt_at), last error, problem (JSON), response (JSON), response
-- status, floor, attempts as claimed; p_answered says the completions
-- answer requests sent (their entries record the provider's status);
-- p_gens gives each row's generation as claimed (store.ClaimedRow.Gen).
-- Returns each row written, with its run when its saga may move.
--
-- Every row is fenced by its lease token: a worker whose lease expired and
-- was reclaimed cannot overwrite the new owner's result. A completion that
-- comes after its lease expired (its replica lost the database, or
-- stalled) is still written while the reclaimed row waits untouched:
-- pending or outcome_unknown, its reclaimed_lease the worker's token, its
-- attempts those of the worker's claim, so nobody sent it since. The
-- worker's answer is then the latest answer for the row, and it replaces
-- the reclaim's conservative floor (store.Reclaim) with the provider's own,
-- or records the success. Every completion clears reclaimed_lease, so a
-- row claimed again is never written by the old lease.
--
-- The key window: an attempt given back (nothing sent) clears the row's
-- first_attempt_at only when the claim of this lease set it (the claim
-- writes it and updated_at with the same now()): the row then never had a
-- request out. A row requeued by an operator starts again at attempts 0
-- but keeps the first attempt it had, so the key-TTL guard measures from
-- it through any later give-back; clearing it there would open a fresh
-- window for a key the provider may have forgotten.
--
-- The audit: each row whose status or attempts change gets the next entry
-- of its hash chain, appended by the same statement (ins), after the head
-- the row carries (audit_head; looked up for a row that carries none yet),
-- and the row's head moves to it. p is the row as the statement's snapshot
-- saw it, what the entry records as "from"; a row changed by someone else
-- since (its status, attempts or head differ) is not written, and counts as
-- lost. The note of a completion without a request (drainer.note) is its
-- entry's reason. Moving audit_head keeps the trigger for other writers
-- (audit_change) from running.
CREATE OR REPLACE FUNCTION drainer.complete_rows(p_seqs bigint[], p_tokens uuid[], p_statuses text[], p_give_back integer[], p_delay_ms bigint[], p_last_errors text[], p_problems text[], p_responses text[], p_codes integer[], p_floors boolean[], p_attempts integer[], p_answered boolean, p_gens smallint[])
 RETURNS TABLE(seq bigint, run text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_written bigint;
    v_gens    smallint[];
BEGIN
    -- PL/pgSQL, not SQL: its statement's plan is kept between calls
    -- (a SQL function's is made anew on every call, and planning an
    -- UPDATE of every queue generation costs more than the batch). The
    -- plan is the generic one from a connection's first call
    -- (plan_cache_mode above): by default each of the first five calls
    -- would plan it anew for its own arrays, several milliseconds each.
    RETURN QUERY
    WITH done AS (
    UPDATE drainer.queue o
       SET status = u.status,
           attempts = n.attempts,
           first_attempt_at = CASE WHEN n.attempts = 0 AND o.first_attempt_at = o.updated_at THEN NULL
                                   ELSE o.first_attempt_at END,
           next_attempt_at = CASE WHEN u.delay_ms < 0 THEN o.next_attempt_at
                                  ELSE now() + u.delay_ms * interval '1 millisecond' END,
           not_before = CASE WHEN u.floor THEN now() + u.delay_ms * interval '1 millisecond'
                             ELSE o.not_before END,
           last_error = n.last_error,
           last_problem = CASE WHEN u.status = 'succeeded' THEN NULL
                               WHEN u.last_error IS NULL THEN o.last_problem
                               ELSE u.problem::jsonb END,
           response = CASE WHEN u.status = 'succeeded' THEN u.response::jsonb ELSE o.response END,
           response_status = n.response_status,
           cancel_cause = CASE WHEN u.status = 'cancelled' THEN 'run_aborted' ELSE o.cancel_cause END,
           lease_token = NULL,
           reclaimed_lease = NULL,
           lease_expires_at = NULL,
           leased_by = NULL,
           updated_at = now(),
           audit_head = CASE WHEN e.changed
                             THEN drainer.audit_hash(e.prev, i.key, e.at, e.event, p.status, u.status, n.attempts,
                                                 e.response_status, e.actor, e.reason, e.detail)
                             ELSE p.audit_head END
      FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::int[], $10::bool[], $11::int[], $13::smallint[])
           AS u(seq, token, status, give_back, delay_ms, last_error, problem, response, response_status, floor, attempts, gen)
      -- each row looked up in its own generation only (the plan prunes the
      -- others at run time): by seq alone, every generation's index
      -- would be probed for every row, twice
      JOIN drainer.queue p ON p.seq = u.seq AND p.gen = u.gen
      JOIN drainer.intents i ON i.seq = u.seq
     CROSS JOIN LATERAL (SELECT p.attempts - u.give_back AS attempts,
                                CASE WHEN u.status = 'succeeded' THEN NULL
                                     ELSE coalesce(u.last_error, p.last_error) END AS last_error,
                                CASE WHEN $12 THEN u.response_status ELSE p.response_status END AS response_status) n
     CROSS JOIN LATERAL (SELECT p.status IS DISTINCT FROM u.status OR p.attempts IS DISTINCT FROM n.attempts AS changed,
                                clock_timestamp() AS at,
                                drainer.audit_event(p.status, u.status) AS event,
                                drainer.audit_actor() AS actor,
                                coalesce(p.audit_head, drainer.audit_head(i.key)) AS prev,
                                CASE WHEN current_setting('drainer.answer', true) = 'on' AND p.status = 'in_flight'
                                     THEN n.response_status END AS response_status,
                                coalesce(nullif(current_setting('drainer.reason', true), ''),
                                         CASE WHEN p.status = 'in_flight'
                                              THEN nullif(current_setting('drainer.note', true), '') END) AS reason,
                                CASE WHEN n.last_error IS DISTINCT FROM p.last_error AND n.last_error IS NOT NULL
                                     THEN sha256(convert_to(n.last_error, 'UTF8')) END AS detail) e
     WHERE o.seq = u.seq AND o.gen = u.gen
       AND (o.lease_token = u.token
            OR (o.reclaimed_lease = u.token AND o.attempts = u.attempts
                AND o.status IN ('pending', 'outcome_unknown')))
       AND o.status = p.status AND o.attempts = p.attempts
       AND o.audit_head IS NOT DISTINCT FROM p.audit_head
    RETURNING o.seq,
           CASE WHEN u.status <> 'pending'
                 AND (o.kind = 'compensation' OR u.status = 'failed'
                      OR EXISTS (SELECT 1 FROM drainer.runs r WHERE r.agent_run_id = i.agent_run_id))
                THEN i.agent_run_id END AS run,
           e.changed, i.key, e.at, e.event, p.status AS from_status, o.status AS to_status, o.attempts,
           e.response_status, e.actor, e.reason, e.detail, e.prev, o.audit_head
    ), ins AS (
    INSERT INTO drainer.audit (key, at, event, from_status, to_status, attempts, response_status,
                           actor, reason, detail_sha256, prev_hash, hash, part)
    SELECT d.key, d.at, d.event, d.from_status, d.to_status, d.attempts, d.response_status,
           d.actor, d.reason, d.detail, d.prev, d.audit_head,
           -- read here, not by audit.part's default (a SQL function there
           -- is planned anew on every execution)
           (SELECT g.part FROM drainer.audit_generations g WHERE g.current)
      FROM done d
     WHERE d.changed
     ORDER BY d.seq
    )
    SELECT d.seq, d.run FROM done d;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    IF v_written < cardinality(p_seqs) THEN
        -- A row not written: its lease is another's (lost), or it is no
        -- longer in the generation it was claimed from (rotate_queue moved
        -- it, reclaimed, while its answer was on the way; or the caller
        -- did not know it). Once more, each row looked up where it is now:
        -- the rows written above are fenced out by their cleared lease.
        SELECT array_agg(coalesce(q.gen, u.gen) ORDER BY u.ord) INTO v_gens
          FROM unnest(p_seqs, p_gens) WITH ORDINALITY AS u(seq, gen, ord)
          LEFT JOIN drainer.queue q ON q.seq = u.seq;
        IF v_gens IS DISTINCT FROM p_gens THEN
            RETURN QUERY SELECT c.seq, c.run
              FROM drainer.complete_rows(p_seqs, p_tokens, p_statuses, p_give_back, p_delay_ms, p_last_errors,
                                             p_problems, p_responses, p_codes, p_floors, p_attempts, p_answered, v_gens) c;
        END IF;
    END IF;
END
$function$;

-- The same without the generations, for the replicas of releases up to 21
-- during a rolling upgrade: each row is found where it is now.
CREATE OR REPLACE FUNCTION drainer.complete_rows(p_seqs bigint[], p_tokens uuid[], p_statuses text[], p_give_back integer[], p_delay_ms bigint[], p_last_errors text[], p_problems text[], p_responses text[], p_codes integer[], p_floors boolean[], p_attempts integer[], p_answered boolean)
 RETURNS TABLE(seq bigint, run text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.seq, c.run
      FROM drainer.complete_rows(p_seqs, p_tokens, p_statuses, p_give_back, p_delay_ms, p_last_errors,
                                     p_problems, p_responses, p_codes, p_floors, p_attempts, p_answered,
                                     array_fill(NULL::smallint, ARRAY[cardinality(p_seqs)])) c
$function$;

-- Not PUBLIC's: code/grants.sql grants it to the roles that may update the
-- queue.

-- The counting functions run with their owner's rights (the role that ran
-- `drainer migrate`), so an agent's role needs no privilege on the
-- sequences to enqueue.
CREATE OR REPLACE FUNCTION drainer.count_enqueue_duplicate()
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog'
AS $function$
    SELECT nextval('drainer.enqueue_duplicates')
$function$;

-- count_enqueue_mismatch counts an enqueue refused with 23505 (same tuple,
-- different payload); like count_enqueue_duplicate it runs with its owner's
-- rights, and a sequence counts even when the caller rolls back.
CREATE OR REPLACE FUNCTION drainer.count_enqueue_mismatch()
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog'
AS $function$
    SELECT nextval('drainer.enqueue_mismatches')
$function$;

-- enqueue records one intent in the caller's transaction and returns its key
-- and whether it was created (docs/reference.md §2). The key space decides
-- whether the tuple is new: enqueue inserts into keys first, so a unique
-- check, not the caller's snapshot, answers (a key committed after a
-- REPEATABLE READ or SERIALIZABLE snapshot raises 40001, and the retry
-- answers created = false); a tuple enqueued before with another payload
-- (compared as JSON values) is refused with 23505. An intent of an aborted
-- run is created cancelled. The tuple check, the key and the hash are
-- evaluated inline (check_tuple only words an error); the payload is
-- converted to text once. Keys recorded before migration 015 keep the hash
-- of the payload's text, which is accepted too.
CREATE OR REPLACE FUNCTION drainer.enqueue(agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb, traceparent text DEFAULT NULL::text)
 RETURNS TABLE(key text, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_variable
DECLARE
    v_key     text;
    v_text    text;
    v_hash    bytea;
    v_legacy  bytea;
    v_old     bytea;
    v_limit   bigint;
    v_size    bigint;
    v_aborted boolean;
    v_seq     bigint;
    v_tp      text := nullif(traceparent, '');
    v_status  text;
    v_at      timestamptz;
    v_actor   text;
    v_reason  text;
    v_event   text;
    v_prev    bytea;
    v_head    bytea;
BEGIN
    IF agent_run_id IS NULL OR step_id IS NULL OR tool_name IS NULL OR business_scope IS NULL
       OR agent_run_id = '' OR step_id = '' OR tool_name = ''
       OR octet_length(agent_run_id) > 1024 OR octet_length(step_id) > 1024
       OR octet_length(tool_name) > 1024 OR octet_length(business_scope) > 1024 THEN
        PERFORM drainer.check_tuple(agent_run_id, step_id, tool_name, business_scope);
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'drainer.enqueue: payload must not be null';
    END IF;
    IF v_tp IS NOT NULL AND drainer.traceparent_error(v_tp) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'drainer.enqueue: ' || drainer.traceparent_error(v_tp);
    END IF;
    -- The limit is on what is stored and sent: jsonb's text rendering, not
    -- the caller's text (a compact [1,1] is 5 bytes, rendered [1, 1] 6).
    v_limit := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_text := payload::text;
    v_size := octet_length(v_text);
    IF v_size > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = '54000',
            MESSAGE = format('drainer.enqueue: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes), '
                             'measured as jsonb renders it (payload::text, with a space after each comma and colon), not as sent',
                             v_size, v_limit);
    END IF;

    v_key := drainer.intent_key(agent_run_id, step_id, tool_name, business_scope);
    v_legacy := sha256(convert_to(v_text, 'UTF8'));
    v_hash := CASE WHEN v_text ~ '\.[0-9]*0\M'
                   THEN sha256(convert_to(drainer.canonical_text(v_text), 'UTF8'))
                   ELSE v_legacy END;

    INSERT INTO drainer.keys AS k (key, payload_hash) VALUES (v_key, v_hash)
    ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING;
    IF FOUND THEN
        v_aborted := EXISTS (SELECT 1 FROM drainer.runs r WHERE r.agent_run_id = enqueue.agent_run_id);
        v_status := CASE WHEN v_aborted THEN 'cancelled' ELSE 'pending' END;
        -- The chain's first entry, appended below with the row, which
        -- carries its hash as audit_head (the insert trigger then stays
        -- quiet).
        v_at := clock_timestamp();
        v_actor := drainer.audit_actor();
        v_reason := nullif(current_setting('drainer.reason', true), '');
        v_event := drainer.audit_event(NULL, v_status);
        v_prev := drainer.audit_head(v_key);
        v_head := drainer.audit_hash(v_prev, v_key, v_at, v_event, NULL, v_status, 0, NULL, v_actor, v_reason, v_hash);
        WITH i AS (
            INSERT INTO drainer.intents AS i
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, traceparent)
            VALUES (v_key, agent_run_id, step_id, tool_name, business_scope, 'forward', payload, v_hash, v_tp)
            ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
            RETURNING i.seq, i.tool_name, i.business_scope, pg_column_size(i.payload) AS payload_bytes -- as inserted: its whole size
        )
        -- The generation is read here rather than by queue.gen's default
        -- (a SQL function in a default is planned anew on every
        -- execution), and so is the audit's below.
        INSERT INTO drainer.queue AS q (seq, gen, tool_name, business_scope, kind, status, cancel_cause, last_error,
                                            audit_head, payload_bytes)
        SELECT i.seq, (SELECT g.gen FROM drainer.queue_generations g WHERE g.current),
               i.tool_name, i.business_scope, 'forward', v_status,
               CASE WHEN v_aborted THEN 'run_aborted' END,
               CASE WHEN v_aborted THEN 'run aborted before this intent was enqueued' END,
               v_head, i.payload_bytes
          FROM i
        RETURNING q.seq INTO v_seq;
        IF v_seq IS NOT NULL THEN
            INSERT INTO drainer.audit (key, at, event, from_status, to_status, attempts, response_status,
                                           actor, reason, detail_sha256, prev_hash, hash, part)
            VALUES (v_key, v_at, v_event, NULL, v_status, 0, NULL, v_actor, v_reason, v_hash, v_prev, v_head,
                    (SELECT a.part FROM drainer.audit_generations a WHERE a.current));
            RETURN QUERY SELECT v_key, true;
            RETURN;
        END IF;
        -- An intent the key space did not know (written by hand): its
        -- hash is the stored one.
        SELECT i.payload_hash INTO v_old FROM drainer.intents i WHERE i.key = v_key;
    ELSE
        SELECT k.payload_hash INTO v_old FROM drainer.keys k WHERE k.key = v_key;
    END IF;

    IF v_old IS DISTINCT FROM v_hash AND v_old IS DISTINCT FROM v_legacy THEN
        PERFORM drainer.count_enqueue_mismatch();
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
    END IF;
    PERFORM drainer.count_enqueue_duplicate();
    RETURN QUERY SELECT v_key, false;
END
$function$;

-- enqueue_batch records many intents with one INSERT per table: the same
-- answers, errors and counters as calling enqueue once per intent in order,
-- but the queue's statement triggers (audit, notification) fire once per
-- batch and the checks run as set operations instead of a call per row.
--
-- Answers: one row per intent, in the intents' order (ord from 1). An
-- intent whose tuple repeats an earlier one of the same batch is answered
-- created = false with the same key (same payload) or refused (different
-- payload), as a second enqueue would be. Errors name the intent:
-- "drainer.enqueue_batch: intent 3: ...", with enqueue's SQLSTATEs (22023
-- invalid tuple or traceparent, 22004 null payload, 54000 payload too large,
-- 23505 same tuple with a different payload); an error rolls back the whole
-- batch.
--
-- Rows are inserted in the intents' order, so seq (and the per-scope order
-- of ordered tools) follows it. The key space's rows, the only rows another
-- enqueue can be waiting for, are inserted in key order instead: two batches
-- that overlap, whatever their orders, wait for one another but never
-- deadlock. (Two transactions that enqueue overlapping tuples in several
-- statements in different orders still can, as with enqueue: 40P01, which
-- the caller retries.)
CREATE OR REPLACE FUNCTION drainer.enqueue_batch(agent_run_ids text[], step_ids text[], tool_names text[], business_scopes text[], payloads jsonb[], traceparents text[] DEFAULT NULL::text[])
 RETURNS TABLE(ord integer, key text, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    n        integer := coalesce(cardinality(agent_run_ids), 0);
    v_limit  bigint := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_bad    integer;
    v_tperr  text;
    v_keys   text[];
    v_hashes bytea[];
    v_legacy bytea[];
    v_key    text;
    v_new    text[];
    v_made   text[];
    v_dups   integer;
    v_actor  text := drainer.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_gen    smallint := drainer.queue_generation(); -- once, not per row (queue.gen's default)
BEGIN
    IF coalesce(cardinality(step_ids), 0) <> n OR coalesce(cardinality(tool_names), 0) <> n
       OR coalesce(cardinality(business_scopes), 0) <> n OR coalesce(cardinality(payloads), 0) <> n
       OR (traceparents IS NOT NULL AND cardinality(traceparents) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
            'drainer.enqueue_batch: the arrays must have one element per intent: agent_run_ids %s, step_ids %s, tool_names %s, business_scopes %s, payloads %s, traceparents %s',
            n, coalesce(cardinality(step_ids), 0), coalesce(cardinality(tool_names), 0),
            coalesce(cardinality(business_scopes), 0), coalesce(cardinality(payloads), 0),
            coalesce(cardinality(traceparents)::text, 'null'));
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;

    -- The first invalid intent, found with one scan; check_tuple then
    -- words its problems as enqueue would.
    SELECT min(u.i) INTO v_bad
      FROM unnest(agent_run_ids, step_ids, tool_names, business_scopes, payloads) WITH ORDINALITY AS u(a, s, t, b, p, i)
     WHERE u.a IS NULL OR u.s IS NULL OR u.t IS NULL OR u.b IS NULL OR u.a = '' OR u.s = '' OR u.t = ''
        OR octet_length(u.a) > 1024 OR octet_length(u.s) > 1024 OR octet_length(u.t) > 1024 OR octet_length(u.b) > 1024
        OR u.p IS NULL OR octet_length(u.p::text) > v_limit;
    IF v_bad IS NOT NULL THEN
        BEGIN
            PERFORM drainer.check_tuple(agent_run_ids[v_bad], step_ids[v_bad], tool_names[v_bad], business_scopes[v_bad]);
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('drainer.enqueue_batch: intent %s: %s', v_bad,
                replace(SQLERRM, 'drainer.enqueue: ', ''));
        END;
        IF payloads[v_bad] IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004',
                MESSAGE = format('drainer.enqueue_batch: intent %s: payload must not be null', v_bad);
        END IF;
        RAISE EXCEPTION USING ERRCODE = '54000', MESSAGE = format(
            'drainer.enqueue_batch: intent %s: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes), '
            'measured as jsonb renders it (payload::text, with a space after each comma and colon), not as sent',
            v_bad, octet_length(payloads[v_bad]::text), v_limit);
    END IF;
    IF traceparents IS NOT NULL THEN
        SELECT u.i, drainer.traceparent_error(u.tp) INTO v_bad, v_tperr
          FROM unnest(traceparents) WITH ORDINALITY AS u(tp, i)
         WHERE nullif(u.tp, '') IS NOT NULL AND drainer.traceparent_error(u.tp) IS NOT NULL
         ORDER BY u.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('drainer.enqueue_batch: intent %s: %s', v_bad, v_tperr);
        END IF;
    END IF;

    -- Keys and payload hashes (canonical, and of the text for keys
    -- recorded before migration 015).
    SELECT array_agg(drainer.intent_key(u.a, u.s, u.t, u.b) ORDER BY u.i),
           array_agg(CASE WHEN u.x ~ '\.[0-9]*0\M'
                          THEN sha256(convert_to(drainer.canonical_text(u.x), 'UTF8'))
                          ELSE sha256(convert_to(u.x, 'UTF8')) END ORDER BY u.i),
           array_agg(sha256(convert_to(u.x, 'UTF8')) ORDER BY u.i)
      INTO v_keys, v_hashes, v_legacy
      FROM (SELECT w.*, w.p::text AS x
              FROM unnest(agent_run_ids, step_ids, tool_names, business_scopes, payloads)
                   WITH ORDINALITY AS w(a, s, t, b, p, i)) u;

    -- The key space decides which keys are new: the first occurrence of
    -- each, inserted in key order (a key another transaction is inserting
    -- is waited for: in the intents' order two batches that overlap in
    -- opposite orders would each wait for a key the other holds).
    WITH ins AS (
        INSERT INTO drainer.keys AS k (key, payload_hash)
        SELECT f.k, f.h
          FROM (SELECT DISTINCT ON (u.k) u.k, u.h
                  FROM unnest(v_keys, v_hashes) WITH ORDINALITY AS u(k, h, i)
                 ORDER BY u.k, u.i) f
         ORDER BY f.k COLLATE "C"
        ON CONFLICT (key) DO NOTHING
        RETURNING k.key
    )
    SELECT coalesce(array_agg(ins.key), '{}') INTO v_new FROM ins;

    IF cardinality(v_new) > 0 THEN
        WITH ins AS (
            INSERT INTO drainer.intents AS o
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, traceparent)
            SELECT f.k, f.a, f.s, f.t, f.b, 'forward', f.p, f.h, nullif(f.tp, '')
              FROM (SELECT DISTINCT ON (u.k) u.*
                      FROM unnest(v_keys, v_hashes, agent_run_ids, step_ids, tool_names, business_scopes, payloads,
                                  coalesce(traceparents, array_fill(NULL::text, ARRAY[n])))
                           WITH ORDINALITY AS u(k, h, a, s, t, b, p, tp, i)
                     WHERE u.k = ANY(v_new)
                     ORDER BY u.k, u.i) f
             ORDER BY f.i
            ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
            RETURNING o.seq, o.key, o.agent_run_id, o.tool_name, o.business_scope, o.payload_hash,
                      pg_column_size(o.payload) AS payload_bytes -- as inserted: its whole size
        ), entries AS (
            -- each row's first audit entry: appended beside the row, whose
            -- audit_head it is (the insert trigger then stays quiet)
            SELECT ins.seq, ins.key, ins.tool_name, ins.business_scope, ins.payload_hash, ins.payload_bytes, s.status,
                   (r.agent_run_id IS NOT NULL) AS aborted, e.at, e.event, e.prev,
                   drainer.audit_hash(e.prev, ins.key, e.at, e.event, NULL, s.status, 0, NULL,
                                          v_actor, v_reason, ins.payload_hash) AS head
              FROM ins
              LEFT JOIN drainer.runs r ON r.agent_run_id = ins.agent_run_id
             CROSS JOIN LATERAL (SELECT CASE WHEN r.agent_run_id IS NOT NULL THEN 'cancelled' ELSE 'pending' END AS status) s
             CROSS JOIN LATERAL (SELECT clock_timestamp() AS at, drainer.audit_event(NULL, s.status) AS event,
                                        -- audit_head(ins.key), inline: planned once for every row
                                        coalesce((SELECT a.hash FROM drainer.audit a
                                                   WHERE a.key = ins.key ORDER BY a.id + 0 DESC LIMIT 1),
                                                 (SELECT x.hash FROM drainer.audit_anchors x
                                                   WHERE x.key = ins.key)) AS prev) e
        ), queued AS (
            INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, status, cancel_cause, last_error, audit_head, gen,
                                           payload_bytes)
            SELECT n.seq, n.tool_name, n.business_scope, 'forward', n.status,
                   CASE WHEN n.aborted THEN 'run_aborted' END,
                   CASE WHEN n.aborted THEN 'run aborted before this intent was enqueued' END,
                   n.head, v_gen, n.payload_bytes
              FROM entries n
             ORDER BY n.seq
        ), audited AS (
            INSERT INTO drainer.audit (key, at, event, from_status, to_status, attempts, response_status,
                                           actor, reason, detail_sha256, prev_hash, hash)
            SELECT n.key, n.at, n.event, NULL, n.status, 0, NULL, v_actor, v_reason, n.payload_hash, n.prev, n.head
              FROM entries n
             ORDER BY n.seq
        )
        SELECT coalesce(array_agg(ins.key), '{}') INTO v_made FROM ins;
    ELSE
        v_made := '{}';
    END IF;

    IF cardinality(v_made) < n THEN
        -- Some intents repeat a tuple (of this batch, or enqueued before):
        -- the first one whose payload differs from the tuple's recorded
        -- payload is refused, as single enqueues in order would refuse it,
        -- after counting the repeats before it. A new key whose intent
        -- existed already (written by hand) compares with that row.
        SELECT d.i, d.k INTO v_bad, v_key
          FROM unnest(v_keys, v_hashes, v_legacy) WITH ORDINALITY AS d(k, h, l, i)
          LEFT JOIN drainer.keys x ON x.key = d.k
          LEFT JOIN drainer.intents o ON o.key = d.k AND d.k = ANY(v_new) AND d.k <> ALL(v_made)
         WHERE coalesce(o.payload_hash, x.payload_hash) IS DISTINCT FROM d.h
           AND coalesce(o.payload_hash, x.payload_hash) IS DISTINCT FROM d.l
         ORDER BY d.i
         LIMIT 1;
        IF FOUND THEN
            PERFORM drainer.count_enqueue_duplicate()
               FROM (SELECT u.i, u.k, row_number() OVER (PARTITION BY u.k ORDER BY u.i) AS nth
                       FROM unnest(v_keys) WITH ORDINALITY AS u(k, i)) d
               LEFT JOIN unnest(v_made) AS m(k) ON m.k = d.k
              WHERE d.i < v_bad AND (m.k IS NULL OR d.nth > 1);
            PERFORM drainer.count_enqueue_mismatch();
            RAISE EXCEPTION USING ERRCODE = '23505',
                MESSAGE = format('drainer.enqueue_batch: intent %s: key %s already enqueued with a different payload', v_bad, v_key);
        END IF;
    END IF;

    -- Answers: created for the first occurrence of each inserted key.
    RETURN QUERY
        SELECT f.i::integer, f.k, (m.k IS NOT NULL AND f.nth = 1)
          FROM (SELECT u.k, u.i, row_number() OVER (PARTITION BY u.k ORDER BY u.i) AS nth
                  FROM unnest(v_keys) WITH ORDINALITY AS u(k, i)) f
          LEFT JOIN unnest(v_made) AS m(k) ON m.k = f.k
         ORDER BY f.i;
    v_dups := n - cardinality(v_made);
    IF v_dups > 0 THEN
        PERFORM drainer.count_enqueue_duplicate() FROM generate_series(1, v_dups);
    END IF;
END
$function$;

-- idempotency_key is the row key of a tuple (docs/reference.md §1):
-- "idem_v1_" and the first 32 hex digits of the SHA-256 of canonical_tuple.
-- It reproduces idemkey.Tuple.Key byte for byte (key vectors checked).
CREATE OR REPLACE FUNCTION drainer.idempotency_key(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT 'idem_v1_' || left(encode(sha256(convert_to(
        drainer.canonical_tuple($1, $2, $3, $4), 'UTF8')), 'hex'), 32)
$function$;

-- intent_key is idempotency_key (with canonical_tuple) in one expression,
-- declared STABLE, which is what its body is (to_json, convert_to): the
-- planner then inlines it where enqueue and enqueue_batch call it, instead
-- of running it as a function call per intent (a non-inlinable SQL function
-- costs ten times its body). idempotency_key keeps its IMMUTABLE
-- declaration for callers that index it. The key vectors are checked
-- through both.
CREATE OR REPLACE FUNCTION drainer.intent_key(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE STRICT
AS $function$
    SELECT 'idem_v1_' || left(encode(sha256(convert_to(
        '{"agent_run_id":' || to_json($1)::text || ',"business_scope":' || to_json($4)::text
        || ',"step_id":' || to_json($2)::text || ',"tool_name":' || to_json($3)::text || '}',
        'UTF8')), 'hex'), 32)
$function$;

-- keep_not_before holds a row's floor: not_before is the earliest moment the
-- provider allows the row's next attempt (its Retry-After, capped, or the
-- backoff the last answer put under next_attempt_at). Only the completion
-- of an attempt sets it and `requeue --ignore-retry-after` clears it; every
-- other writer of next_attempt_at (a resume, a reload, a deferral, a
-- reclaim, a revive) may only move the row to a time at or after it. The
-- trigger outbox_keep_not_before calls this for every statement that would
-- break the floor, whoever runs it.
CREATE OR REPLACE FUNCTION drainer.keep_not_before()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    NEW.next_attempt_at := NEW.not_before;
    RETURN NEW;
END
$function$;

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
CREATE OR REPLACE FUNCTION drainer.notify_outbox()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    first_due text;
BEGIN
    IF current_setting('drainer.notify', true) IS DISTINCT FROM 'off' THEN
        FOR i IN 0..7 LOOP
            IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('drainer.wake.' || i, 0)) THEN
                SELECT (extract(epoch FROM n.next_attempt_at) * 1000000)::bigint || ':' || n.seq
                  INTO first_due
                  FROM new_rows n
                 WHERE n.status = 'pending' AND isfinite(n.next_attempt_at)
                 ORDER BY n.next_attempt_at, n.seq
                 LIMIT 1;
                IF first_due IS NOT NULL THEN
                    PERFORM pg_notify('drainer.outbox', first_due);
                END IF;
                RETURN NULL;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$function$;

-- A compensation row that succeeded marks its forward row compensated, in the
-- same transaction.
CREATE OR REPLACE FUNCTION drainer.on_compensation_succeeded()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE drainer.queue f
       SET status = 'compensated', updated_at = now()
      FROM drainer.intents c
      JOIN drainer.intents fi ON fi.key = c.forward_key
     WHERE c.seq = NEW.seq AND f.seq = fi.seq AND f.status = 'succeeded';
    PERFORM pg_notify('drainer.outbox', '');
    RETURN NULL;
END
$function$;

-- A forward row that ends failed aborts its run, in the same transaction as
-- the status change, so the saga is never lost nor started twice.
CREATE OR REPLACE FUNCTION drainer.on_forward_failed()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_run  text;
    v_step text;
BEGIN
    SELECT i.agent_run_id, i.step_id INTO v_run, v_step FROM drainer.intents i WHERE i.seq = NEW.seq;
    PERFORM drainer.abort_run_internal(v_run, format('step %s (%s) failed', v_step, NEW.tool_name), 'drainer');
    RETURN NULL;
END
$function$;

-- open_transactions names the transactions running now in this database,
-- other than the caller's (their virtual transaction ids, from pg_locks,
-- and each one's database from pg_stat_activity, both of which every role
-- may read). A rotation records them once a partition's content is final
-- (rotate_queue, rotate_audit) and truncates it only when none of them is
-- running any more (any_running): one of them may hold a snapshot that
-- still sees what the truncation would take away. A transaction in another
-- database cannot read this one's tables, so it is not waited for (as
-- vacuum does not wait for it): a transaction held open for hours in
-- another database of the same server would otherwise stall every
-- truncation here for as long.
CREATE OR REPLACE FUNCTION drainer.open_transactions()
 RETURNS text[]
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(array_agg(l.virtualxid::text), '{}')
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
       AND a.datname = pg_catalog.current_database()
$function$;

-- outbox_write carries a write through the outbox view to the tables behind
-- it: an insert makes the intent and its queue row (defaults as the old
-- table had them), an update writes the queue row and, only when one of
-- them changed, the intent's columns, a delete removes both. The triggers
-- on queue then audit the change as for any other writer. RETURNING sees
-- what was stored (a floor the queue's trigger kept included).
--
-- A statement on the view reads its rows without locking them, so an update
-- or delete is written only while the queue row is still exactly the one
-- the statement read (compared under the row's lock): a row that another
-- transaction changed meanwhile (a claim, a completion, a reclaim) is left
-- as that transaction made it, and the statement does not count it, as a
-- table's UPDATE skips a row that no longer matches its WHERE. A blind
-- write would put back the state the statement read and undo the other
-- transaction's change.
CREATE OR REPLACE FUNCTION drainer.outbox_write()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_bytes integer; -- the payload's whole size as the intent stored it (queue.payload_bytes)
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM drainer.queue q
         WHERE q.seq = OLD.seq
           AND (q.status, q.attempts, q.next_attempt_at, q.not_before, q.first_attempt_at, q.lease_token,
                q.lease_expires_at, q.leased_by, q.reclaimed_lease, q.last_error, q.last_problem, q.response,
                q.response_status, q.note, q.cancel_cause, q.updated_at)
               IS NOT DISTINCT FROM
               (OLD.status, OLD.attempts, OLD.next_attempt_at, OLD.not_before, OLD.first_attempt_at, OLD.lease_token,
                OLD.lease_expires_at, OLD.leased_by, OLD.reclaimed_lease, OLD.last_error, OLD.last_problem, OLD.response,
                OLD.response_status, OLD.note, OLD.cancel_cause, OLD.updated_at);
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        DELETE FROM drainer.intents i WHERE i.seq = OLD.seq;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.business_scope := coalesce(NEW.business_scope, '');
        NEW.kind := coalesce(NEW.kind, 'forward');
        NEW.created_at := coalesce(NEW.created_at, now());
        IF NEW.seq IS NULL THEN
            INSERT INTO drainer.intents (key, agent_run_id, step_id, tool_name, business_scope, kind,
                                             payload, payload_hash, forward_key, traceparent, created_at)
            VALUES (NEW.key, NEW.agent_run_id, NEW.step_id, NEW.tool_name, NEW.business_scope, NEW.kind,
                    NEW.payload, NEW.payload_hash, NEW.forward_key, NEW.traceparent, NEW.created_at)
            RETURNING seq, pg_column_size(payload) INTO NEW.seq, v_bytes;
        ELSE
            INSERT INTO drainer.intents (seq, key, agent_run_id, step_id, tool_name, business_scope, kind,
                                             payload, payload_hash, forward_key, traceparent, created_at)
            OVERRIDING SYSTEM VALUE
            VALUES (NEW.seq, NEW.key, NEW.agent_run_id, NEW.step_id, NEW.tool_name, NEW.business_scope, NEW.kind,
                    NEW.payload, NEW.payload_hash, NEW.forward_key, NEW.traceparent, NEW.created_at)
            RETURNING pg_column_size(payload) INTO v_bytes;
        END IF;
        INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, status, attempts, next_attempt_at,
                                       not_before, first_attempt_at, lease_token, lease_expires_at, leased_by,
                                       reclaimed_lease, last_error, last_problem, response, response_status,
                                       note, cancel_cause, updated_at, payload_bytes)
        VALUES (NEW.seq, NEW.tool_name, NEW.business_scope, NEW.kind, coalesce(NEW.status, 'pending'),
                coalesce(NEW.attempts, 0), coalesce(NEW.next_attempt_at, now()), NEW.not_before,
                NEW.first_attempt_at, NEW.lease_token, NEW.lease_expires_at, NEW.leased_by, NEW.reclaimed_lease,
                NEW.last_error, NEW.last_problem, NEW.response, NEW.response_status, NEW.note, NEW.cancel_cause,
                coalesce(NEW.updated_at, now()), v_bytes)
        RETURNING status, attempts, next_attempt_at, updated_at
             INTO NEW.status, NEW.attempts, NEW.next_attempt_at, NEW.updated_at;
        RETURN NEW;
    END IF;
    UPDATE drainer.queue q
       SET status = NEW.status, attempts = NEW.attempts, next_attempt_at = NEW.next_attempt_at,
           not_before = NEW.not_before, first_attempt_at = NEW.first_attempt_at, lease_token = NEW.lease_token,
           lease_expires_at = NEW.lease_expires_at, leased_by = NEW.leased_by,
           reclaimed_lease = NEW.reclaimed_lease, last_error = NEW.last_error, last_problem = NEW.last_problem,
           response = NEW.response, response_status = NEW.response_status, note = NEW.note,
           cancel_cause = NEW.cancel_cause, updated_at = NEW.updated_at
     WHERE q.seq = OLD.seq
       AND (q.status, q.attempts, q.next_attempt_at, q.not_before, q.first_attempt_at, q.lease_token,
            q.lease_expires_at, q.leased_by, q.reclaimed_lease, q.last_error, q.last_problem, q.response,
            q.response_status, q.note, q.cancel_cause, q.updated_at)
           IS NOT DISTINCT FROM
           (OLD.status, OLD.attempts, OLD.next_attempt_at, OLD.not_before, OLD.first_attempt_at, OLD.lease_token,
            OLD.lease_expires_at, OLD.leased_by, OLD.reclaimed_lease, OLD.last_error, OLD.last_problem, OLD.response,
            OLD.response_status, OLD.note, OLD.cancel_cause, OLD.updated_at)
    RETURNING q.next_attempt_at INTO NEW.next_attempt_at;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF (NEW.key, NEW.agent_run_id, NEW.step_id, NEW.tool_name, NEW.business_scope, NEW.kind, NEW.payload,
        NEW.payload_hash, NEW.forward_key, NEW.traceparent, NEW.created_at, NEW.seq)
       IS DISTINCT FROM
       (OLD.key, OLD.agent_run_id, OLD.step_id, OLD.tool_name, OLD.business_scope, OLD.kind, OLD.payload,
        OLD.payload_hash, OLD.forward_key, OLD.traceparent, OLD.created_at, OLD.seq) THEN
        IF NEW.seq IS DISTINCT FROM OLD.seq OR NEW.tool_name IS DISTINCT FROM OLD.tool_name
           OR NEW.business_scope IS DISTINCT FROM OLD.business_scope OR NEW.kind IS DISTINCT FROM OLD.kind THEN
            RAISE EXCEPTION USING ERRCODE = '0A000',
                MESSAGE = format('drainer.outbox: seq, tool_name, business_scope and kind of row %s cannot change', OLD.key);
        END IF;
        UPDATE drainer.intents i
           SET key = NEW.key, agent_run_id = NEW.agent_run_id, step_id = NEW.step_id, payload = NEW.payload,
               payload_hash = NEW.payload_hash, forward_key = NEW.forward_key, traceparent = NEW.traceparent,
               created_at = NEW.created_at
         WHERE i.seq = OLD.seq
        RETURNING pg_column_size(i.payload) INTO v_bytes;
        IF NEW.payload IS DISTINCT FROM OLD.payload THEN
            UPDATE drainer.queue q SET payload_bytes = v_bytes WHERE q.seq = OLD.seq;
        END IF;
    END IF;
    RETURN NEW;
END
$function$;

-- payload_hash is the hash payloads are compared by: SHA-256 of
-- payload_text, so payloads equal as JSON values hash alike.
CREATE OR REPLACE FUNCTION drainer.payload_hash(payload jsonb)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT sha256(convert_to(drainer.payload_text(payload), 'UTF8'))
$function$;

-- payload_text is the text the payload hash is taken over: jsonb's own text
-- when it holds no number with a trailing fractional zero (the quick test
-- may also match inside a string, which only costs the slow path), else the
-- canonical text (canonical_text).
CREATE OR REPLACE FUNCTION drainer.payload_text(payload jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT CASE WHEN payload::text ~ '\.[0-9]*0\M' THEN drainer.canonical_text(payload::text)
                ELSE payload::text END
$function$;

-- prune_audit deleted audit entries one by one; release 20's daemons call
-- it from their retention pass. Entries now leave only a generation at a
-- time, verified before they are anchored (rotate_audit): a deletion here
-- would anchor entries nobody checked, and leave the ledger's records
-- unverifiable. It deletes nothing and returns 0.
CREATE OR REPLACE FUNCTION drainer.prune_audit(p_before timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE sql
 STABLE
AS $function$
    SELECT 0
$function$;

-- prune_rows moves up to p_limit rows of one terminal status, last
-- changed before p_before, to the tombstones (their keys stay in the key
-- space, marked pruned, with the status and the audit head they ended
-- with: audit_problems holds the chain to them). Rows of a run whose saga is still open stay, and so
-- does a succeeded forward row of a tool in p_comp_tools (a tool whose route
-- names a compensation) until its run's saga has settled or
-- p_windows_ms[i] (the route's compensation_window) has passed since it
-- succeeded: its run can still be aborted and need it undone. Pruning a
-- run's rows stamps the run's rows_pruned_at, so its abort outlives their
-- tombstones. A pruned row's call record (call_records) is deleted with it.
--
-- A pass costs what it prunes, not what is left to prune: the rows are
-- taken in the order of the status index (status, updated_at), each
-- generation's walked in step, and the walk stops at p_limit; each is then
-- deleted by its primary key in its generation. The plan settings pin
-- that shape, whatever the statistics say: a generation's are taken while
-- its rows are pending, and a plan made from them sorted every prunable
-- row for each pass and looked each victim up by scanning the status
-- index, so pruning 1,000 of 97,000 succeeded rows took 15-21 s, and a
-- backlog of them hours (TestPruneReadsWhatItPrunes).
CREATE OR REPLACE FUNCTION drainer.prune_rows(p_status text, p_before timestamp with time zone, p_limit integer, p_comp_tools text[], p_windows_ms bigint[])
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_material TO 'off'
 SET jit TO 'off'
AS $function$
DECLARE
    n integer;
BEGIN
    IF p_status NOT IN ('succeeded', 'failed', 'compensated', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.prune_rows: %s rows are never pruned automatically', p_status);
    END IF;
    WITH victims AS (
        SELECT o.seq, o.gen FROM drainer.queue o
          JOIN drainer.intents i ON i.seq = o.seq
          LEFT JOIN drainer.runs r ON r.agent_run_id = i.agent_run_id
          LEFT JOIN unnest(p_comp_tools, p_windows_ms) AS w(tool, ms)
                 ON p_status = 'succeeded' AND o.kind = 'forward' AND w.tool = o.tool_name
         WHERE o.status = p_status AND o.updated_at < p_before
           AND (r.agent_run_id IS NULL OR r.saga_state = 'done')
           AND (w.tool IS NULL OR r.saga_state = 'done'
                OR o.updated_at < now() - w.ms * interval '1 millisecond')
         ORDER BY o.updated_at
         LIMIT p_limit
         FOR UPDATE OF o SKIP LOCKED
    ), dequeued AS (
        -- locked above in p_status: nobody changes them before the commit
        DELETE FROM drainer.queue q USING victims v
         WHERE q.seq = v.seq AND q.gen = v.gen
        RETURNING q.seq, q.status, q.audit_head
    ), moved AS (
        DELETE FROM drainer.intents i USING dequeued d
         WHERE i.seq = d.seq
        RETURNING i.key, i.payload_hash, d.status, d.audit_head, i.agent_run_id
    ), forgotten AS (
        -- The gateway's record of the call goes with its row.
        DELETE FROM drainer.call_records c USING moved m WHERE c.key = m.key
    ), stamped AS (
        UPDATE drainer.runs r SET rows_pruned_at = now()
         WHERE r.agent_run_id IN (SELECT m.agent_run_id FROM moved m)
    )
    INSERT INTO drainer.keys AS k (key, payload_hash, final_status, audit_head, pruned_at)
    SELECT m.key, m.payload_hash, m.status, m.audit_head, now() FROM moved m
    ON CONFLICT (key) DO UPDATE SET final_status = excluded.final_status, audit_head = excluded.audit_head,
                                    pruned_at = excluded.pruned_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$function$;

-- The form daemons of release 14 call: no compensable tools known.
CREATE OR REPLACE FUNCTION drainer.prune_rows(p_status text, p_before timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE sql
AS $function$
    SELECT drainer.prune_rows(p_status, p_before, p_limit, '{}'::text[], '{}'::bigint[])
$function$;

-- queue_generation is the default of queue.gen: the generation new rows go
-- to (queue_generations, rotate_queue). It runs with the owner's rights,
-- so whoever may insert into queue need not read queue_generations; it is
-- not PUBLIC's: code/grants.sql grants it to the roles that may insert into
-- the queue (deploy/sql/roles.sql grants the runtime role; a producer's
-- enqueue runs as the owner).
CREATE OR REPLACE FUNCTION drainer.queue_generation()
 RETURNS smallint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$ SELECT gen FROM drainer.queue_generations WHERE current $function$;


-- result lets an agent read an outcome without knowing the table.
CREATE OR REPLACE FUNCTION drainer.result(key text)
 RETURNS TABLE(status text, response jsonb, last_error text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
    SELECT o.status, o.response, o.last_error FROM drainer.outbox o WHERE o.key = $1
    UNION ALL
    SELECT t.final_status, NULL::jsonb, NULL::text FROM drainer.tombstones t
     WHERE t.key = $1 AND NOT EXISTS (SELECT 1 FROM drainer.outbox o WHERE o.key = $1)
$function$;

-- rotate_audit does one step of the audit's generations (a ring of four,
-- docs/architecture.md, "Generations") and says which, so that its caller
-- (store.Prune, the retention pass) calls it again while there is work,
-- each step its own short transaction:
--
--   sealed         a generation no longer current: the transactions running
--                  now are recorded; one of them may have read the current
--                  generation before the flip and still append there.
--   anchored N     none of those is running any more, so the generation
--                  holds its last entry, and it was closed longer ago than
--                  p_retention (every entry in it is older): it is
--                  verified and each of its N chains gets an anchor
--                  version (audit_anchor_generation: its last hash, status
--                  and attempts, and any problem found, kept for good),
--                  recorded in the ledger, where audit_verify and
--                  audit_head find it once the entries are gone. A
--                  generation anchored by release 21 (unverified) is
--                  anchored again. Also: anchors written before the
--                  ledger (migration 022) recorded in it.
--   emptied        the transactions running now are recorded again: one
--                  of them may hold a snapshot from before the anchors,
--                  which would see a chain without its beginning.
--   truncated N    none of those is running any more: the generation is
--                  verified once more (what was tampered with since the
--                  anchoring is recorded: audit_anchor_generation), its N
--                  entries are truncated and it becomes the next to be
--                  current, and the ledger records the truncation (its
--                  records' vectors go: their entries cannot be digested
--                  again). An entry found there that the anchors do not
--                  cover (written by hand into that generation) is
--                  anchored first, then waited for again.
--   flipped        the current generation is older than p_span and the
--                  next one is ready: entries go there from now on.
--   waiting, idle  nothing to do now (waiting: for transactions to end).
--   busy           another replica is rotating, or a lock was not granted
--                  within lock_timeout: try later.
--
-- With p_span = p_retention / 3 an entry is kept between p_retention and
-- 4/3 of it; a generation that is not ready when its turn comes (a longer
-- retention since, say) is not flipped to: the current one grows instead.
-- It runs with the owner's rights: the runtime role cannot truncate.
CREATE OR REPLACE FUNCTION drainer.rotate_audit(p_retention interval, p_span interval)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
DECLARE
    v_cur    smallint;
    v_opened timestamptz;
    v_next   smallint;
    g        record;
    v_part   text;
    v_max    bigint;
    v_n      bigint;
    v_waited boolean := false;
    v_older  boolean := false;
    v_rec    bigint;
    v_more   bigint;
    v_b      integer;
    v_items  bigint;
    v_vec    bytea;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('drainer.rotate_audit', 0)) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', '200ms', true);
    SELECT a.part, a.opened_at INTO v_cur, v_opened FROM audit_generations a WHERE a.current FOR UPDATE;

    -- Anchors written before the ledger (the upgrade to migration 022)
    -- go into it first, as one 'anchors' record. Release 21's kept no
    -- status: a row's takes its row's now (its tombstone's, once pruned),
    -- so that a change made with the triggers off from now on is told.
    IF EXISTS (SELECT 1 FROM audit_anchors x WHERE x.record IS NULL)
       OR EXISTS (SELECT 1 FROM audit_anchor_history h WHERE h.record IS NULL) THEN
        IF NOT pg_try_advisory_xact_lock(hashtextextended('drainer.audit_ledger', 0)) THEN
            RETURN 'busy';
        END IF;
        v_rec := drainer.audit_ledger_next();
        UPDATE audit_anchors x
           SET status = u.status, attempts = u.attempts, record = v_rec,
               row_hash = drainer.audit_anchor_hash(x.vid, x.key, x.hash, x.last_id, u.status, u.attempts, x.problem, v_rec)
          FROM (SELECT a.vid,
                       coalesce(a.status, CASE WHEN q.status = 'in_flight' THEN 'pending' ELSE q.status END, k.final_status) AS status,
                       CASE WHEN a.status IS NOT NULL THEN a.attempts
                            ELSE q.attempts - CASE WHEN q.status = 'in_flight' THEN 1 ELSE 0 END END AS attempts
                  FROM audit_anchors a
                  LEFT JOIN intents i ON i.key = a.key
                  LEFT JOIN queue q ON q.seq = i.seq
                  LEFT JOIN keys k ON k.key = a.key AND k.pruned_at IS NOT NULL AND i.key IS NULL
                 WHERE a.record IS NULL) u
         WHERE x.vid = u.vid;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        UPDATE audit_anchor_history h
           SET record = v_rec,
               row_hash = drainer.audit_anchor_hash(h.vid, h.key, h.hash, h.last_id, h.status, h.attempts, h.problem, v_rec)
         WHERE h.record IS NULL;
        GET DIAGNOSTICS v_more = ROW_COUNT;
        v_n := v_n + v_more;
        v_b := drainer.audit_buckets(v_n);
        SELECT v.items, v.vector INTO v_items, v_vec FROM drainer.audit_anchors_vector(v_rec, v_b) v;
        PERFORM drainer.audit_ledger_append(v_rec, 'anchors', NULL, NULL, NULL, NULL, v_items, v_b, v_vec);
        RETURN 'anchored ' || v_n;
    END IF;

    -- The closed generations, the oldest first. Only the oldest is
    -- anchored and truncated (an anchor stands for all of a chain's
    -- entries before it); the others are only sealed meanwhile.
    FOR g IN SELECT * FROM audit_generations a
              WHERE NOT a.current AND NOT a.ready
              ORDER BY a.closed_at LOOP
        v_part := format('%I.%I', 'drainer', 'audit_p' || g.part);
        IF g.wait_for IS NULL THEN
            UPDATE audit_generations a
               SET wait_for = drainer.open_transactions(),
                   changed_at = now()
             WHERE a.part = g.part;
            RETURN CASE WHEN g.anchored_to IS NULL THEN 'sealed' ELSE 'emptied' END;
        END IF;
        IF v_older THEN
            CONTINUE;
        END IF;
        v_older := true;
        IF drainer.any_running(g.wait_for) THEN
            v_waited := true;
            CONTINUE;
        END IF;
        IF g.anchored_to IS NULL OR g.anchor_record IS NULL THEN
            -- Sealed: no transaction that could still append here (one
            -- that read the current generation before the flip) is
            -- running, so what it holds is final. (Anchored by release
            -- 21, without verifying it: anchored again.)
            IF g.closed_at >= now() - p_retention THEN
                CONTINUE; -- its newest entries are not past the retention yet
            END IF;
            IF NOT pg_try_advisory_xact_lock(hashtextextended('drainer.audit_ledger', 0)) THEN
                RETURN 'busy';
            END IF;
            RETURN 'anchored ' || drainer.audit_anchor_generation(g.part, false);
        END IF;
        -- Anchored, and no snapshot from before the anchors remains. Under
        -- a SHARE lock (nobody writes there any more; readers go on) the
        -- entries are counted and verified once more: what was tampered
        -- with since the anchoring is recorded before they go. Under the
        -- ACCESS EXCLUSIVE lock that follows (readers of audit wait for
        -- it) only the truncation runs.
        IF NOT drainer.try_lock(v_part::regclass, 'SHARE') THEN
            RETURN 'busy';
        END IF;
        EXECUTE format('SELECT count(*), coalesce(max(id), 0) FROM %s', v_part) INTO v_n, v_max;
        IF v_max > g.anchored_to THEN
            -- an entry written there since (by hand, naming the
            -- generation): anchored again first
            UPDATE audit_generations SET anchored_to = NULL, anchor_record = NULL, wait_for = '{}', changed_at = now()
             WHERE part = g.part;
            RETURN 'anchored 0';
        END IF;
        IF NOT pg_try_advisory_xact_lock(hashtextextended('drainer.audit_ledger', 0)) THEN
            RETURN 'busy';
        END IF;
        PERFORM drainer.audit_anchor_generation(g.part, true);
        IF NOT drainer.try_lock(v_part::regclass, 'ACCESS EXCLUSIVE') THEN
            RETURN 'busy';
        END IF;
        UPDATE audit_ledger SET vector = NULL WHERE kind = 'entries' AND epoch = g.epoch;
        PERFORM drainer.audit_ledger_append(drainer.audit_ledger_next(), 'truncated', g.epoch, g.part, NULL,
                                                g.anchored_to, v_n, 0, NULL);
        EXECUTE format('TRUNCATE %s', v_part);
        UPDATE audit_generations
           SET ready = true, opened_at = NULL, closed_at = NULL, anchored_to = NULL, wait_for = NULL,
               epoch = NULL, anchor_record = NULL, changed_at = now()
         WHERE part = g.part;
        RETURN 'truncated ' || v_n;
    END LOOP;

    -- The flip.
    IF v_opened < now() - p_span THEN
        v_next := (v_cur + 1) % 4;
        IF (SELECT a.ready FROM audit_generations a WHERE a.part = v_next) THEN
            UPDATE audit_generations SET current = false, closed_at = now(), changed_at = now() WHERE part = v_cur;
            UPDATE audit_generations
               SET current = true, ready = false, opened_at = now(), changed_at = now(),
                   epoch = nextval('drainer.audit_epoch')
             WHERE part = v_next;
            RETURN 'flipped';
        END IF;
    END IF;
    RETURN CASE WHEN v_waited THEN 'waiting' ELSE 'idle' END;
END
$function$;

-- rotate_queue does one step of the generations' rotation
-- (docs/architecture.md, "Generations") and says which, so that its caller
-- (drainer/rotation.go) calls it again while there is work, each step its
-- own short transaction:
--
--   moved N U      N rows (at most p_move) of a generation that is no
--                  longer current were moved out of it: settled ones to
--                  queue_settled (gen 0), pending ones to the current
--                  generation. Only once its backlog has drained (at most
--                  p_chunk rows due or in flight there); rows in flight
--                  stay until their attempt ends. The moves go through the
--                  generation in seq order, each from where the last one
--                  ended (queue_generations.moved_upto), found through
--                  the primary key: a move reads the rows it moves, not
--                  the row versions the moves before it left, so every
--                  move of a drained generation costs the same however
--                  large it was. Past the last row, the next step starts
--                  again from the first (moved 0): rows that were in
--                  flight when the moves passed them, or inserted late.
--                  U: the microseconds the move held the partition, from
--                  its lock to the move's end (its commit follows), which
--                  the caller sizes the next move by: the step's own
--                  round trip, gate and commit cost the same whatever the
--                  move's size, and counted in they would shrink every
--                  move to the least. The partition is locked
--                  EXCLUSIVE for the move, so no writer can change a row
--                  while it moves (a writer waiting for the lock reads the
--                  moved row afterwards). Every claim waits for that lock
--                  (a claim locks each generation's partition), so the
--                  caller sizes p_move to hold it briefly
--                  (drainer/rotation.go).
--   emptied        a generation was found empty: the transactions running
--                  now are recorded, since one of them may hold a snapshot
--                  from before the last move that still sees its rows
--                  there.
--   truncated      none of those transactions is running any more: the
--                  generation is truncated (its dead row versions go with
--                  it, no vacuum needed) and becomes the next to be current.
--   flipped        the next generation is ready and the current one holds
--                  p_flip_rows rows or more, or its backlog drained (at
--                  least p_idle_rows settled rows, none due or in flight),
--                  or it holds settled rows and is older than p_flip_age:
--                  new rows go to the next one from now on.
--   waiting, idle  nothing to do now (waiting: for transactions to end,
--                  or for a backlog to drain).
--   busy           another replica is rotating, or a lock was not granted
--                  within lock_timeout: try later.
--
-- A transaction that read the current generation before a flip may still
-- insert into the old one (a producer's REPEATABLE READ snapshot): the
-- truncation checks, under the partition's ACCESS EXCLUSIVE lock, that it
-- is still empty, and moves such rows first. It runs with the owner's
-- rights: the runtime role reaches the partitions only through queue.
CREATE OR REPLACE FUNCTION drainer.rotate_queue(p_flip_rows bigint, p_idle_rows integer, p_flip_age interval, p_chunk integer, p_move integer)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_cur    smallint;
    v_opened timestamptz;
    v_next   smallint;
    v_ready  boolean;
    g        record;
    v_part   text;
    v_any    boolean;
    v_active bigint;
    v_moved  bigint;
    v_rows   bigint;
    v_waited boolean := false;
    v_flip   boolean;
    v_settled bigint;
    v_from   bigint;
    v_upto   bigint;
    v_held   timestamptz;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('drainer.rotate_queue', 0)) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', '200ms', true);
    SELECT q.gen, q.opened_at INTO v_cur, v_opened FROM queue_generations q WHERE q.current FOR UPDATE;

    -- The generations that are no longer current, the oldest first.
    FOR g IN SELECT * FROM queue_generations q
              WHERE NOT q.current AND NOT q.ready
              ORDER BY (q.gen - v_cur + 2) % 3 LOOP
        v_part := format('%I.%I', 'drainer', 'queue_g' || g.gen);
        -- a row left past the moves, else anywhere: each the first in
        -- the primary key's order (a scan of the table would read the
        -- moved rows' versions first)
        v_from := coalesce(g.moved_upto, 0);
        -- ((SELECT $1): a value the planner does not see; planning against
        -- it would look up the primary key's actual first entry, through
        -- the entries of every row moved and not yet vacuumed away)
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM (SELECT seq FROM %s WHERE seq > (SELECT $1::bigint) ORDER BY seq LIMIT 1) f)', v_part)
           INTO v_any USING v_from;
        IF NOT v_any AND v_from > 0 THEN
            v_from := 0;
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM (SELECT seq FROM %s ORDER BY seq LIMIT 1) f)', v_part) INTO v_any;
        END IF;
        IF v_any THEN
            -- rows still being drained there: due or in flight (a row
            -- waiting for a retry, a pause or a hold is not), counted in
            -- their partial indexes (ordered as those are: the statistics
            -- of a closed generation may still say every row is pending,
            -- and a scan of the table would then look for due rows through
            -- all of its settled ones)
            EXECUTE format($q$SELECT (SELECT count(*) FROM (SELECT 1 FROM %1$s WHERE status = 'pending' AND next_attempt_at <= now()
                                                             ORDER BY next_attempt_at, seq LIMIT %2$s) a)
                                   + (SELECT count(*) FROM (SELECT 1 FROM %1$s WHERE status = 'in_flight'
                                                             ORDER BY lease_expires_at LIMIT %2$s) b)$q$,
                           v_part, p_chunk + 1) INTO v_active;
            IF v_active > p_chunk THEN
                v_waited := true; -- its backlog is still draining there
                CONTINUE;
            END IF;
            IF NOT drainer.try_lock(v_part::regclass, 'EXCLUSIVE') THEN
                RETURN 'busy';
            END IF;
            v_held := clock_timestamp();
            EXECUTE format($q$
                WITH moved AS (
                    -- by key, as an array, from a value the planner does not
                    -- see: planned as a join, or against the value, the move
                    -- was planned by reading the primary key's first entries,
                    -- those of every row moved and not yet vacuumed away
                    -- (17 ms a move, and growing, after 500,000 rows moved)
                    DELETE FROM %1$s q
                     WHERE q.seq = ANY (ARRAY(SELECT m.seq FROM %1$s m
                                               WHERE m.seq > (SELECT $1::bigint) AND m.status <> 'in_flight'
                                               ORDER BY m.seq LIMIT %2$s))
                    RETURNING q.*
                ), ins AS (
                INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, status, attempts, next_attempt_at,
                        not_before, first_attempt_at, lease_token, lease_expires_at, leased_by, reclaimed_lease,
                        last_error, last_problem, response, response_status, note, cancel_cause, updated_at,
                        audit_head, gen, payload_bytes)
                SELECT m.seq, m.tool_name, m.business_scope, m.kind, m.status, m.attempts, m.next_attempt_at,
                       m.not_before, m.first_attempt_at, m.lease_token, m.lease_expires_at, m.leased_by,
                       m.reclaimed_lease, m.last_error, m.last_problem, m.response, m.response_status, m.note,
                       m.cancel_cause, m.updated_at,
                       -- a row written before migration 019 carries no head
                       -- yet: its chain's is looked up, so that the insert
                       -- trigger appends nothing (the row only moves)
                       coalesce(m.audit_head, drainer.audit_head(i.key)),
                       CASE WHEN m.status = 'pending' THEN %3$s ELSE 0 END,
                       m.payload_bytes
                  FROM moved m
                  LEFT JOIN drainer.intents i ON i.seq = m.seq
                RETURNING 1
                )
                SELECT (SELECT count(*) FROM ins), (SELECT max(m.seq) FROM moved m)$q$, v_part, greatest(p_move, 1), v_cur)
              INTO v_moved, v_upto USING v_from;
            IF v_moved = 0 AND v_from > 0 THEN
                -- past the last row: from the first again, at the next step
                UPDATE queue_generations SET moved_upto = NULL, changed_at = now() WHERE gen = g.gen;
                RETURN 'moved 0';
            END IF;
            IF v_moved = 0 THEN
                v_waited := true; -- only rows in flight are left
                CONTINUE;
            END IF;
            UPDATE queue_generations SET wait_for = NULL, moved_upto = v_upto, changed_at = now() WHERE gen = g.gen;
            RETURN 'moved ' || v_moved || ' ' || (extract(epoch FROM clock_timestamp() - v_held) * 1000000)::bigint;
        END IF;
        IF g.wait_for IS NULL THEN
            UPDATE queue_generations q
               SET wait_for = drainer.open_transactions(),
                   changed_at = now()
             WHERE q.gen = g.gen;
            RETURN 'emptied';
        END IF;
        IF drainer.any_running(g.wait_for) THEN
            v_waited := true;
            CONTINUE;
        END IF;
        IF NOT drainer.try_lock(v_part::regclass, 'ACCESS EXCLUSIVE') THEN
            RETURN 'busy';
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_any;
        IF v_any THEN
            -- rows inserted late (a snapshot from before the flip): moved
            -- at the next step, from the first, then waited for again
            UPDATE queue_generations SET wait_for = NULL, moved_upto = NULL, changed_at = now() WHERE gen = g.gen;
            RETURN 'moved 0';
        END IF;
        EXECUTE format('TRUNCATE %s', v_part);
        UPDATE queue_generations
           SET ready = true, wait_for = NULL, opened_at = NULL, moved_upto = NULL, changed_at = now()
         WHERE gen = g.gen;
        RETURN 'truncated';
    END LOOP;

    -- The flip.
    v_next := v_cur % 3 + 1;
    SELECT q.ready INTO v_ready FROM queue_generations q WHERE q.gen = v_next;
    IF v_ready THEN
        v_part := format('%I.%I', 'drainer', 'queue_g' || v_cur);
        -- its size from the statistics (a moment late: no scan), its age
        -- from when it became current
        SELECT coalesce(s.n_live_tup + s.n_dead_tup, 0) INTO v_rows
          FROM pg_stat_user_tables s WHERE s.relid = v_part::regclass;
        v_flip := v_rows >= p_flip_rows;
        IF NOT v_flip THEN
            -- a generation is closed early only for settled rows to take
            -- away: rows that only wait (a retry, a pause) would otherwise
            -- be moved from generation to generation
            EXECUTE format($q$SELECT count(*) FROM (SELECT 1 FROM %s WHERE status NOT IN ('pending', 'in_flight') LIMIT %s) s$q$,
                           v_part, p_idle_rows) INTO v_settled;
            IF v_settled >= p_idle_rows THEN
                -- its backlog drained
                EXECUTE format($q$SELECT NOT EXISTS (SELECT 1 FROM %1$s WHERE status = 'in_flight')
                                     AND NOT EXISTS (SELECT 1 FROM %1$s WHERE status = 'pending' AND next_attempt_at <= now())$q$,
                               v_part) INTO v_flip;
            END IF;
            v_flip := v_flip OR (v_settled > 0 AND v_opened < now() - p_flip_age);
        END IF;
        IF v_flip THEN
            UPDATE queue_generations SET current = false, changed_at = now() WHERE gen = v_cur;
            UPDATE queue_generations SET current = true, ready = false, opened_at = now(), changed_at = now()
             WHERE gen = v_next;
            RETURN 'flipped';
        END IF;
    END IF;
    RETURN CASE WHEN v_waited THEN 'waiting' ELSE 'idle' END;
END
$function$;

-- The same with moves of p_chunk rows, for the replicas of releases up to
-- 25 during a rolling upgrade.
CREATE OR REPLACE FUNCTION drainer.rotate_queue(p_flip_rows bigint, p_idle_rows integer, p_flip_age interval, p_chunk integer)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'drainer', 'pg_catalog', 'pg_temp'
AS $function$
    SELECT drainer.rotate_queue(p_flip_rows, p_idle_rows, p_flip_age, p_chunk, p_chunk)
$function$;

-- Not PUBLIC's: code/grants.sql grants them to the roles that may update
-- the queue (deploy/sql/roles.sql grants the runtime role).

-- saga_lock_key is the advisory lock of one run's saga: advance_saga tries
-- it, and the operator commands that change a run (requeue's revival,
-- resolve) take it, so a saga step and an operator never interleave.
CREATE OR REPLACE FUNCTION drainer.saga_lock_key(p_run text)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT hashtextextended('drainer.saga.' || p_run, 0)
$function$;

-- session_role names the role a session acts as: the role chosen with SET
-- ROLE, else the session user. Outside SECURITY DEFINER functions that is
-- current_user; inside them, where current_user is their owner, it still
-- names the caller. (The setting role can only name a role the session user
-- may become; "none" is reserved and never a role's name.)
CREATE OR REPLACE FUNCTION drainer.session_role()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text)
$function$;

-- sweep_sagas advances up to p_limit active sagas whose run id sorts after
-- p_after (a cursor: every active saga gets its turn, however many there
-- are), each in a subtransaction of its own: a saga whose step fails is
-- noted on its run and skipped, the others keep their progress. It returns
-- each run looked at with its new state ('error: …' for a failed step).
CREATE OR REPLACE FUNCTION drainer.sweep_sagas(p_after text, p_limit integer, p_tools text[], p_comp_tools text[])
 RETURNS TABLE(agent_run_id text, state text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    r       record;
    v_state text;
BEGIN
    FOR r IN SELECT x.agent_run_id AS id FROM drainer.runs x
              WHERE x.saga_state IN ('waiting', 'compensating') AND x.agent_run_id > coalesce(p_after, '')
              ORDER BY x.agent_run_id
              LIMIT p_limit
    LOOP
        BEGIN
            v_state := drainer.advance_saga(r.id, p_tools, p_comp_tools);
        EXCEPTION WHEN OTHERS THEN
            v_state := 'error: ' || SQLERRM;
            UPDATE drainer.runs x SET saga_note = 'saga step failed: ' || SQLERRM
             WHERE x.agent_run_id = r.id;
        END;
        agent_run_id := r.id;
        state := v_state;
        RETURN NEXT;
    END LOOP;
END
$function$;

-- traceparent_error words why tp is not a W3C traceparent (version 00
-- form: version-trace_id-parent_id-flags, lowercase hex, no all-zero ids,
-- version ff invalid), or returns null when it is one.
CREATE OR REPLACE FUNCTION drainer.traceparent_error(tp text)
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

-- try_lock locks p_rel in p_mode (SHARE, EXCLUSIVE or ACCESS EXCLUSIVE) within the
-- caller's lock_timeout and says whether it got the lock: a rotation
-- (rotate_queue, rotate_audit) that did not answers busy and tries again
-- later, instead of failing its transaction. It runs with its caller's
-- rights.
CREATE OR REPLACE FUNCTION drainer.try_lock(p_rel regclass, p_mode text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_mode NOT IN ('SHARE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.try_lock: lock mode %L is not one a rotation takes', p_mode);
    END IF;
    EXECUTE format('LOCK TABLE %s IN %s MODE', p_rel, p_mode);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$function$;


-- The functions that are not PUBLIC's, and who runs them. Each is granted
-- to every role that holds the named privilege on the named table, so an
-- existing runtime role keeps working across the upgrade that brought the
-- function (deploy/sql/roles.sql grants them to a new one). Installed
-- after the functions, in the same transaction.
DO $grants$
DECLARE
    f record;
    g record;
BEGIN
    FOR f IN SELECT v.fn::regprocedure AS fn, v.tab::regclass AS tab, v.privilege
               FROM (VALUES
                   -- the completion: the roles that may update the queue
                   ('drainer.complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean, smallint[])',
                    'drainer.queue', 'UPDATE'),
                   -- (and without the generations, for older replicas)
                   ('drainer.complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean)',
                    'drainer.queue', 'UPDATE'),
                   -- the rotation of generations: the same roles
                   ('drainer.rotate_queue(bigint, integer, interval, integer, integer)', 'drainer.queue', 'UPDATE'),
                   -- (and with moves of a chunk, for older replicas)
                   ('drainer.rotate_queue(bigint, integer, interval, integer)', 'drainer.queue', 'UPDATE'),
                   -- queue.gen's default: the roles that may insert into the queue
                   ('drainer.queue_generation()', 'drainer.queue', 'INSERT'),
                   -- the audit's rotation: the roles that may prune it
                   ('drainer.rotate_audit(interval, interval)', 'drainer.audit', 'DELETE'),
                   -- audit.part's default: the roles that may insert into it
                   ('drainer.audit_generation()', 'drainer.audit', 'INSERT'),
                   -- `drainer audit checkpoint` extends the ledger it signs:
                   -- the roles that may read the audit
                   ('drainer.audit_horizon()', 'drainer.audit', 'SELECT'),
                   ('drainer.audit_ledger_extend(bigint)', 'drainer.audit', 'SELECT')
               ) AS v(fn, tab, privilege)
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f.fn);
        FOR g IN SELECT DISTINCT e.grantee
                   FROM pg_catalog.pg_class c
                  CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
                  WHERE c.oid = f.tab AND e.privilege_type = f.privilege
                    AND e.grantee <> c.relowner AND e.grantee <> 0
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', f.fn, g.grantee::regrole);
        END LOOP;
    END LOOP;
END
$grants$;


-- outbox: one row per intent with every column readers have always had
-- (docs/reference.md §2), the intent (intents, written once at enqueue)
-- joined to its place in the queue (queue, the narrow row the drain
-- rewrites). Writes through it go to both tables (outbox_write); the
-- engine's own statements write the tables directly.
CREATE OR REPLACE VIEW drainer.outbox AS
SELECT i.seq, i.key, i.agent_run_id, i.step_id, i.tool_name, i.business_scope, i.kind,
       i.payload, i.payload_hash, q.status, q.attempts, q.next_attempt_at, q.first_attempt_at,
       q.last_error, q.last_problem, q.response, q.response_status, q.lease_token,
       q.lease_expires_at, q.leased_by, i.forward_key, i.traceparent, q.note, q.cancel_cause,
       i.created_at, q.updated_at, q.not_before, q.reclaimed_lease
  FROM drainer.intents i
  JOIN drainer.queue q ON q.seq = i.seq;

-- sagas: one row per aborted run with its saga state and counts, readable
-- with one query: SELECT * FROM drainer.sagas WHERE agent_run_id = $1.
CREATE OR REPLACE VIEW drainer.sagas AS
SELECT r.agent_run_id,
       r.saga_state,
       r.saga_note,
       r.aborted_at,
       r.abort_reason,
       r.aborted_by,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status IN ('pending', 'in_flight'))  AS forward_open,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'succeeded')               AS forward_succeeded,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'compensated')             AS forward_compensated,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'failed')                  AS forward_failed,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'cancelled')               AS forward_cancelled,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status IN ('pending', 'in_flight')) AS compensations_open,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status = 'succeeded')          AS compensations_succeeded,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status = 'compensation_failed') AS compensations_failed,
       r.saga_updated_at
  FROM drainer.runs r
  LEFT JOIN drainer.outbox o ON o.agent_run_id = r.agent_run_id
 GROUP BY r.agent_run_id;

-- tombstones: the keys whose rows were pruned (key, payload hash, final
-- status, when), kept so a late re-enqueue is still answered created =
-- false; rows of the key space (keys) marked pruned.
CREATE OR REPLACE VIEW drainer.tombstones AS
    SELECT k.key, k.payload_hash, k.final_status, k.pruned_at
      FROM drainer.keys k
     WHERE k.pruned_at IS NOT NULL;


-- Writes through the outbox view go to intents and queue (outbox_write).
CREATE OR REPLACE TRIGGER outbox_write
    INSTEAD OF INSERT OR UPDATE OR DELETE ON drainer.outbox
    FOR EACH ROW EXECUTE FUNCTION drainer.outbox_write();

-- Every row's creation is the first entry of its audit chain. The enqueue
-- functions append it themselves and set the row's audit_head; any other
-- insert (a compensation row, an alert row, a write through drainer.outbox,
-- another role's) is recorded by audit_rows, before the row is written.
CREATE OR REPLACE TRIGGER queue_audit_insert
    BEFORE INSERT ON drainer.queue
    FOR EACH ROW
    WHEN (NEW.audit_head IS NULL)
    EXECUTE FUNCTION drainer.audit_rows();

-- Every status or attempts change is an entry of the row's audit chain,
-- whoever makes it. A statement that appends its own entries moves the
-- row's audit_head (store.Complete); every other change of status or
-- attempts is recorded by audit_change, before the row is written. A claim
-- (pending -> in_flight) writes none: the entry that ends the attempt
-- records it. The condition is all the drain's statements pay.
CREATE OR REPLACE TRIGGER queue_audit_update
    BEFORE UPDATE ON drainer.queue
    FOR EACH ROW
    WHEN ((OLD.status IS DISTINCT FROM NEW.status OR OLD.attempts IS DISTINCT FROM NEW.attempts)
          AND NOT (OLD.status = 'pending' AND NEW.status = 'in_flight')
          AND NEW.audit_head IS NOT DISTINCT FROM OLD.audit_head)
    EXECUTE FUNCTION drainer.audit_change();

-- A compensation row that succeeded marks its forward row compensated.
CREATE OR REPLACE TRIGGER queue_compensation_succeeded
    AFTER UPDATE OF status ON drainer.queue
    FOR EACH ROW
    WHEN (NEW.kind = 'compensation' AND NEW.status = 'succeeded' AND OLD.status IS DISTINCT FROM 'succeeded')
    EXECUTE FUNCTION drainer.on_compensation_succeeded();

-- A forward row that ends failed (not an alert row) aborts its run.
CREATE OR REPLACE TRIGGER queue_forward_failed
    AFTER UPDATE OF status ON drainer.queue
    FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed' AND NEW.kind = 'forward'
          AND NEW.tool_name <> drainer.alert_tool())
    EXECUTE FUNCTION drainer.on_forward_failed();

-- Fires only for statements that set next_attempt_at or not_before (claims
-- do neither), and calls its function only when the floor is broken.
CREATE OR REPLACE TRIGGER queue_keep_not_before
    BEFORE UPDATE OF next_attempt_at, not_before ON drainer.queue
    FOR EACH ROW
    WHEN (NEW.next_attempt_at < NEW.not_before)
    EXECUTE FUNCTION drainer.keep_not_before();

-- One wake notification per inserting statement (notify_outbox).
CREATE OR REPLACE TRIGGER queue_notify
    AFTER INSERT ON drainer.queue
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION drainer.notify_outbox();


-- Migration 020's guard, which held writes to queue until the triggers
-- above were installed.
DROP TRIGGER IF EXISTS queue_migrating ON drainer.queue;
DROP FUNCTION IF EXISTS drainer.queue_migrating();
