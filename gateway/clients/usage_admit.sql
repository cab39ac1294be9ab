-- ragmux_usage_admit: the admission of every call of one project that waits in one web process,
-- in one statement (gateway.clients.limiter, gateway.clients.usage). Under the project's lock, the
-- calls are checked one after the other in the order given, each against the counters as the calls
-- before it left them, exactly as if each had run its own statement in that order; then every
-- counter row the admitted calls reserved on is written once. One lock hand-over and one round
-- trip per batch, not per call.
--
-- A call is its key, whether it takes a request slot (p_requests: 1 for an admission, 0 for a
-- top-up: the reservation a RAG call adds once its retrieved context is known, which is not a new
-- request), its estimated tokens and micro-dollars, and its checks (the rows of c_* whose c_calls
-- is its index, in its own check order; "current + addend > threshold" denies, see
-- gateway.clients.limits). Returned per call: the index among its own checks of the one that
-- denied (0: admitted), and the counters of its windows after it: 2 x windows values a call in
-- each array, the project's windows then its key's (requests, tokens used + reserved,
-- micro-dollars used + reserved, and what the calls in flight hold of tokens and micro-dollars, so
-- a refusal can say whether spend or reservations caused it).
--
-- Synchronous commit is off for the statement: a database crash may forget the last moment of
-- reservations (calls then get in rather than out); in exchange no call waits for the disk. The
-- rows are the project's windows, then each key's, keys in order of first appearance; the first
-- call of a window makes its rows. (Loops, not queries: a statement inside costs more than all of
-- them for a batch of one.)
--
-- The function's current source, which the latest migration that defines it loads
-- (gateway/clients/migrations/0012_usage_top_up.py). A change to it comes with a new migration
-- that drops the old signature and loads this file, while the one that loaded it before takes
-- back the text it ran, so that it stays what it was.
CREATE FUNCTION ragmux_usage_admit(
    p_project bigint, p_periods text[], p_starts timestamptz[],
    p_keys bigint[], p_requests int[], p_tokens bigint[], p_micros bigint[],
    c_calls int[], c_tiers text[], c_periods text[], c_columns text[], c_addends bigint[], c_thresholds bigint[],
    OUT denied int[], OUT requests bigint[], OUT tokens bigint[], OUT micros bigint[],
    OUT held_tokens bigint[], OUT held_micros bigint[]
) LANGUAGE plpgsql AS $$
DECLARE
    v_windows int := array_length(p_periods, 1);
    v_calls int := coalesce(array_length(p_keys, 1), 0);
    v_checks int := coalesce(array_length(c_calls, 1), 0);
    v_keys bigint[];
    r_tiers text[];
    r_owners bigint[];
    r_periods text[];
    r_starts timestamptz[];
    r_requests bigint[];
    r_tokens bigint[];
    r_micros bigint[];
    r_held_tokens bigint[];
    r_held_micros bigint[];
    d_requests bigint[];
    d_tokens bigint[];
    d_micros bigint[];
    v_key bigint;
    v_offset int;
    v_first int;
    v_denied int;
    v_row int;
    v_value bigint;
    i int;
    j int := 1;
    w int;
BEGIN
    PERFORM ragmux_usage_lock(ARRAY[p_project]);
    PERFORM set_config('synchronous_commit', 'off', true);
    v_keys := '{}';
    r_tiers := array_fill('project'::text, ARRAY[v_windows]);
    r_owners := array_fill(p_project, ARRAY[v_windows]);
    r_periods := p_periods;
    r_starts := p_starts;
    FOREACH v_key IN ARRAY p_keys LOOP
        CONTINUE WHEN v_key = ANY(v_keys);
        v_keys := v_keys || v_key;
        r_tiers := r_tiers || array_fill('key'::text, ARRAY[v_windows]);
        r_owners := r_owners || array_fill(v_key, ARRAY[v_windows]);
        r_periods := r_periods || p_periods;
        r_starts := r_starts || p_starts;
    END LOOP;
    FOR i IN 1 .. 2 LOOP
        SELECT array_agg(u.requests ORDER BY w.n),
               array_agg(u.prompt_tokens + u.completion_tokens + u.reserved_tokens ORDER BY w.n),
               array_agg(u.cost_micros + u.reserved_micros ORDER BY w.n),
               array_agg(u.reserved_tokens ORDER BY w.n),
               array_agg(u.reserved_micros ORDER BY w.n)
          INTO r_requests, r_tokens, r_micros, r_held_tokens, r_held_micros
          FROM unnest(r_tiers, r_owners, r_periods, r_starts) WITH ORDINALITY AS w(tier, owner_id, period, period_start, n)
          LEFT JOIN usage_counters u
            ON u.tier = w.tier AND u.owner_id = w.owner_id AND u.period = w.period AND u.period_start = w.period_start;
        EXIT WHEN array_position(r_requests, NULL) IS NULL;
        INSERT INTO usage_counters (tier, owner_id, period, period_start, requests, prompt_tokens,
                                    completion_tokens, cost_micros, reserved_tokens, reserved_micros)
        SELECT w.tier, w.owner_id, w.period, w.period_start, 0, 0, 0, 0, 0, 0
          FROM unnest(r_tiers, r_owners, r_periods, r_starts) AS w(tier, owner_id, period, period_start)
            ON CONFLICT (tier, owner_id, period, period_start) DO NOTHING;
    END LOOP;
    d_requests := array_fill(0::bigint, ARRAY[array_length(r_tiers, 1)]);
    d_tokens := d_requests;
    d_micros := d_requests;
    denied := array_fill(0, ARRAY[v_calls]);
    requests := '{}';
    tokens := '{}';
    micros := '{}';
    held_tokens := '{}';
    held_micros := '{}';
    FOR i IN 1 .. v_calls LOOP
        v_offset := array_position(v_keys, p_keys[i]) * v_windows;
        v_first := j;
        v_denied := 0;
        WHILE j <= v_checks AND c_calls[j] = i LOOP
            IF v_denied = 0 THEN
                v_row := array_position(p_periods, c_periods[j])
                         + CASE c_tiers[j] WHEN 'project' THEN 0 ELSE v_offset END;
                v_value := CASE c_columns[j] WHEN 'requests' THEN r_requests[v_row]
                                             WHEN 'tokens' THEN r_tokens[v_row] ELSE r_micros[v_row] END;
                IF v_value + c_addends[j] > c_thresholds[j] THEN
                    v_denied := j - v_first + 1;
                END IF;
            END IF;
            j := j + 1;
        END LOOP;
        denied[i] := v_denied;
        IF v_denied = 0 THEN
            FOR w IN 1 .. v_windows LOOP
                FOREACH v_row IN ARRAY ARRAY[w, v_offset + w] LOOP
                    r_requests[v_row] := r_requests[v_row] + p_requests[i];
                    r_tokens[v_row] := r_tokens[v_row] + p_tokens[i];
                    r_micros[v_row] := r_micros[v_row] + p_micros[i];
                    r_held_tokens[v_row] := r_held_tokens[v_row] + p_tokens[i];
                    r_held_micros[v_row] := r_held_micros[v_row] + p_micros[i];
                    d_requests[v_row] := d_requests[v_row] + p_requests[i];
                    d_tokens[v_row] := d_tokens[v_row] + p_tokens[i];
                    d_micros[v_row] := d_micros[v_row] + p_micros[i];
                END LOOP;
            END LOOP;
        END IF;
        requests := requests || r_requests[1:v_windows] || r_requests[v_offset + 1:v_offset + v_windows];
        tokens := tokens || r_tokens[1:v_windows] || r_tokens[v_offset + 1:v_offset + v_windows];
        micros := micros || r_micros[1:v_windows] || r_micros[v_offset + 1:v_offset + v_windows];
        held_tokens := held_tokens || r_held_tokens[1:v_windows] || r_held_tokens[v_offset + 1:v_offset + v_windows];
        held_micros := held_micros || r_held_micros[1:v_windows] || r_held_micros[v_offset + 1:v_offset + v_windows];
    END LOOP;
    UPDATE usage_counters u
       SET requests = u.requests + d.requests,
           reserved_tokens = u.reserved_tokens + d.tokens,
           reserved_micros = u.reserved_micros + d.micros
      FROM unnest(r_tiers, r_owners, r_periods, r_starts, d_requests, d_tokens, d_micros)
           AS d(tier, owner_id, period, period_start, requests, tokens, micros)
     WHERE (d.requests > 0 OR d.tokens <> 0 OR d.micros <> 0)
       AND u.tier = d.tier AND u.owner_id = d.owner_id AND u.period = d.period AND u.period_start = d.period_start;
END $$;
