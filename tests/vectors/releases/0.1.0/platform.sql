--
-- PostgreSQL database dump
--

-- Dumped from database version 16.2
-- Dumped by pg_dump version 16.2

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: platform_ingest_book_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.platform_ingest_book_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN PERFORM pg_notify('platform_ingest_control', NEW.book_id); RETURN NULL; END $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.attempts (
    attempt_id bigint NOT NULL,
    book_id text NOT NULL,
    run_id bigint NOT NULL,
    engine_run_id text NOT NULL,
    state text NOT NULL,
    last_seq bigint DEFAULT 0 NOT NULL,
    last_line_sha256 bytea,
    hint_offset bigint DEFAULT 0 NOT NULL,
    hint_line_bytes integer DEFAULT 0 NOT NULL,
    hint_file text,
    stream_index bigint,
    stream_version text,
    chunker_version text,
    error_kind text,
    error_seq bigint,
    error_offset bigint,
    error_detail text,
    last_line_time text,
    last_applied_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    exit_status integer,
    exited_at timestamp with time zone,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    compacted_seq bigint DEFAULT 0 NOT NULL,
    compacted_sha256 bytea,
    compacted_at timestamp with time zone,
    compaction_pending boolean DEFAULT false NOT NULL,
    CONSTRAINT attempts_compacted_seq_check CHECK ((compacted_seq >= 0)),
    CONSTRAINT attempts_hint_offset_check CHECK ((hint_offset >= 0)),
    CONSTRAINT attempts_last_seq_check CHECK ((last_seq >= 0)),
    CONSTRAINT attempts_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'active'::text, 'parked'::text, 'finished'::text, 'stalled'::text, 'quarantined'::text, 'refused'::text, 'superseded'::text, 'exited'::text, 'disowned'::text, 'abandoned'::text])))
);


--
-- Name: attempts_attempt_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.attempts ALTER COLUMN attempt_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.attempts_attempt_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: book_problems; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.book_problems (
    book_id text NOT NULL,
    kind text NOT NULL,
    detail text NOT NULL,
    path text,
    since timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: books; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.books (
    book_id text NOT NULL,
    path text NOT NULL,
    scan_offset bigint DEFAULT 0 NOT NULL,
    scan_line_bytes integer DEFAULT 0 NOT NULL,
    scan_sha256 bytea,
    scan_file text,
    scan_stream text,
    scan_mode text,
    scan_epoch bigint DEFAULT 0 NOT NULL,
    error_kind text,
    error_seq bigint,
    error_offset bigint,
    error_detail text,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    starts_from_zero boolean DEFAULT false NOT NULL,
    CONSTRAINT books_scan_offset_check CHECK ((scan_offset >= 0))
);


--
-- Name: ingest_schema_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ingest_schema_version (
    version integer NOT NULL,
    migrated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: line_hashes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.line_hashes (
    attempt_id bigint NOT NULL,
    seq bigint NOT NULL,
    sha256 bytea NOT NULL
);


--
-- Name: line_skips; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.line_skips (
    attempt_id bigint NOT NULL,
    seq bigint NOT NULL,
    sha256 bytea NOT NULL,
    action_id bigint NOT NULL
);


--
-- Name: operator_actions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operator_actions (
    action_id bigint NOT NULL,
    book_id text NOT NULL,
    engine_run_id text,
    action text NOT NULL,
    by_whom text NOT NULL,
    reason text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    evidence jsonb DEFAULT '{}'::jsonb NOT NULL
);


--
-- Name: operator_actions_action_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.operator_actions ALTER COLUMN action_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.operator_actions_action_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: projection_failures; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.projection_failures (
    book_id text NOT NULL,
    engine_run_id text NOT NULL,
    projection text NOT NULL,
    seq bigint,
    detail text NOT NULL,
    failures bigint DEFAULT 1 NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: projection_tracking; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.projection_tracking (
    projection text NOT NULL,
    attempt_id bigint NOT NULL,
    last_seq bigint NOT NULL,
    CONSTRAINT projection_tracking_last_seq_check CHECK ((last_seq >= 0))
);


--
-- Name: projections; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.projections (
    name text NOT NULL,
    version integer NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    rebuilt_at timestamp with time zone,
    CONSTRAINT projections_version_check CHECK ((version >= 1))
);


--
-- Name: pruned_streams; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.pruned_streams (
    book_id text NOT NULL,
    engine_run_id text NOT NULL,
    run_id bigint NOT NULL,
    attempt_id bigint NOT NULL,
    last_seq bigint NOT NULL,
    pruned_at timestamp with time zone DEFAULT now() NOT NULL,
    cleanup_pending boolean DEFAULT true NOT NULL
);


--
-- Name: run_units; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_units (
    run_id bigint NOT NULL,
    unit text NOT NULL,
    unit_index bigint NOT NULL,
    attempt_id bigint NOT NULL,
    seq bigint NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    run_id bigint NOT NULL,
    book_id text NOT NULL,
    state text NOT NULL,
    reason text,
    stop text,
    refusal text,
    outcome text,
    exit_code integer,
    committed_micro_usd bigint DEFAULT 0 NOT NULL,
    shortfall_micro_usd bigint,
    settled_micro_usd bigint,
    progress jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT runs_committed_micro_usd_check CHECK ((committed_micro_usd >= 0)),
    CONSTRAINT runs_settled_micro_usd_check CHECK ((settled_micro_usd >= 0)),
    CONSTRAINT runs_shortfall_micro_usd_check CHECK ((shortfall_micro_usd >= 0)),
    CONSTRAINT runs_state_check CHECK ((state = ANY (ARRAY['running'::text, 'paused'::text, 'completed'::text, 'failed'::text, 'refused'::text]))),
    CONSTRAINT runs_stop_check CHECK ((stop = ANY (ARRAY['soft'::text, 'hard'::text])))
);


--
-- Name: runs_run_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.runs ALTER COLUMN run_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.runs_run_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: stream_starts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.stream_starts (
    book_id text NOT NULL,
    engine_run_id text NOT NULL,
    hint_offset bigint NOT NULL,
    hint_line_bytes integer NOT NULL,
    hint_sha256 bytea,
    hint_file text,
    hint_stream text,
    CONSTRAINT stream_starts_hint_offset_check CHECK ((hint_offset >= 0))
);


--
-- Data for Name: attempts; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.attempts (attempt_id, book_id, run_id, engine_run_id, state, last_seq, last_line_sha256, hint_offset, hint_line_bytes, hint_file, stream_index, stream_version, chunker_version, error_kind, error_seq, error_offset, error_detail, last_line_time, last_applied_at, created_at, exit_status, exited_at, changed_at, compacted_seq, compacted_sha256, compacted_at, compaction_pending) OVERRIDING SYSTEM VALUE VALUES (1, 'book-1', 1, '0b6c1f3e-0001-4000-8000-000000000001', 'finished', 14, '\xdaab8fa099cfeef1f9c76782cc0eb666a59a9991883887d73eb4aabbf7a481a3', 1825, 215, '65024:2170889', 1, '1.3', 'demo-1', NULL, NULL, NULL, NULL, '2026-12-03T19:15:35.938Z', '2026-12-03 19:15:36.008213+00', '2026-12-03 19:15:36.008213+00', NULL, NULL, '2026-12-03 19:15:36.008213+00', 0, NULL, NULL, false);
INSERT INTO public.attempts (attempt_id, book_id, run_id, engine_run_id, state, last_seq, last_line_sha256, hint_offset, hint_line_bytes, hint_file, stream_index, stream_version, chunker_version, error_kind, error_seq, error_offset, error_detail, last_line_time, last_applied_at, created_at, exit_status, exited_at, changed_at, compacted_seq, compacted_sha256, compacted_at, compaction_pending) OVERRIDING SYSTEM VALUE VALUES (2, 'book-1', 1, '0b6c1f3e-0001-4000-8000-000000000002', 'finished', 8, '\x6ba44077531d0521580e250bd6409777c8913c033fd8852e3e76eb457be6a385', 2943, 212, '65024:2170889', 1826, '1.3', 'demo-1', NULL, NULL, NULL, NULL, '2026-12-03T19:15:36.032Z', '2026-12-03 19:15:36.057408+00', '2026-12-03 19:15:36.057408+00', NULL, NULL, '2026-12-03 19:15:36.057408+00', 0, NULL, NULL, false);
INSERT INTO public.attempts (attempt_id, book_id, run_id, engine_run_id, state, last_seq, last_line_sha256, hint_offset, hint_line_bytes, hint_file, stream_index, stream_version, chunker_version, error_kind, error_seq, error_offset, error_detail, last_line_time, last_applied_at, created_at, exit_status, exited_at, changed_at, compacted_seq, compacted_sha256, compacted_at, compaction_pending) OVERRIDING SYSTEM VALUE VALUES (3, 'book-2', 2, '0b6c1f3e-0002-4000-8000-000000000001', 'quarantined', 3, '\x291fb95331fc5a51cded5bfb40859a2898b9faf657266100dd54007db263445f', 390, 97, '65024:2156097', 1, '1.3', 'hand-1', 'malformed', 4, 390, 'money field committed_micro_usd must be a non-negative JSON integer of micro-USD, found a string', '2026-01-15T09:30:00.000Z', '2026-12-03 19:15:36.069384+00', '2026-12-03 19:15:36.069384+00', NULL, NULL, '2026-12-03 19:15:36.14821+00', 0, NULL, NULL, false);


--
-- Data for Name: book_problems; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: books; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.books (book_id, path, scan_offset, scan_line_bytes, scan_sha256, scan_file, scan_stream, scan_mode, scan_epoch, error_kind, error_seq, error_offset, error_detail, registered_at, starts_from_zero) VALUES ('book-1', '@BOOKS@/book-1', 2943, 212, '\x6ba44077531d0521580e250bd6409777c8913c033fd8852e3e76eb457be6a385', '65024:2170889', '0b6c1f3e-0001-4000-8000-000000000002', 'auto', 0, NULL, NULL, NULL, NULL, '2026-12-03 19:15:35.988224+00', false);
INSERT INTO public.books (book_id, path, scan_offset, scan_line_bytes, scan_sha256, scan_file, scan_stream, scan_mode, scan_epoch, error_kind, error_seq, error_offset, error_detail, registered_at, starts_from_zero) VALUES ('book-2', '@BOOKS@/book-2', 586, 97, '\x741b4b67aeec384b6acd46cf81503f01460dc51559c6d9e671d2f4af06483f96', '65024:2156097', '0b6c1f3e-0002-4000-8000-000000000001', 'auto', 1, NULL, NULL, NULL, NULL, '2026-12-03 19:15:36.065222+00', false);


--
-- Data for Name: ingest_schema_version; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.ingest_schema_version (version, migrated_at) VALUES (1, '2026-12-03 19:15:35.645843+00');
INSERT INTO public.ingest_schema_version (version, migrated_at) VALUES (2, '2026-12-03 19:15:35.645843+00');
INSERT INTO public.ingest_schema_version (version, migrated_at) VALUES (3, '2026-12-03 19:15:35.645843+00');
INSERT INTO public.ingest_schema_version (version, migrated_at) VALUES (4, '2026-12-03 19:15:35.645843+00');


--
-- Data for Name: line_hashes; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 1, '\x8309b641b1d8338a9fa1db07e04d198b1f0da7026970993a06d932dd494a63e8');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 2, '\x252dc6f64ad06ef31a12536aee0f2c95c87aab75a12663eba1ffe095649c1a92');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 3, '\xd369538207f91f6a40e4d203c165bedd6e3ab27cfd238a8fbce92213556602c0');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 4, '\x88deb59e74eef4639aad701c9d3639455c9ea1637e942bb20d5647e8c26db548');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 5, '\xec4328364e73b5ddde36451436ba6d6c27670270b476bfae963ae3da8fc7457b');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 6, '\x11e6829ca699bc4635603114ca7964295825571b78cbbf65afdc4afc147a7d1e');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 7, '\xd1494dd9936632e2059ca992426375d9789961b094b13854c5c9e4cb1fe2f8f3');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 8, '\x4f4b3552df0f013800d4afa5a9363313c0303c88aff34cdb496e871ca860564a');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 9, '\x4e214fe8feb8792bfdb75ae8a75681e82965a9097fa448be420291dd5b9e9e77');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 10, '\x022188d3e7bf02762211ea7574ad1f496935225c47519ffb9064efee2f6a2e8a');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 11, '\x81959e16721ac2a8a2dab65ddbc4ba1393293ad723acc630839a33b96ed15f98');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 12, '\x7edee92647b58c28b10c5b1d1fce01772e59ccd206f03d7122a8698182eae4a3');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 13, '\xf11f3157f1458c743a38b82dfd7ef0cdd38ac33224315f81c5c875546fb40274');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (1, 14, '\xdaab8fa099cfeef1f9c76782cc0eb666a59a9991883887d73eb4aabbf7a481a3');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 1, '\xd9c37d3fbf6560d6ca86817e36d1b2bd322dc84b03161d7fc1ed14e968607c62');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 2, '\x8fdc0e6ad72d8411df8685f394a38f58c4549f4cce4793f9237d652fe326e4d3');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 3, '\x5f199c7f7de5b4dc728df144b6afd363af751a572d58b03359065a985092a516');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 4, '\xaa1f7d87575e21970ce95c53269e5d6c27415ac7681536f549eba0296734ec09');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 5, '\xcd30afdf4e851416fcf90b8984660cbbbb095bd3afd322ebe83268ffb89f7904');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 6, '\xd637f37b3d47dd21435f45c6694318485be6ec2a207bcd9fa203226784be9f2c');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 7, '\x546db5797f6e861bed0d19563f7ff021cd8cb4237ad034eda1580cd9c1e38ebb');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (2, 8, '\x6ba44077531d0521580e250bd6409777c8913c033fd8852e3e76eb457be6a385');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (3, 1, '\xdbb321c1b35c6a8696b04ef5447777e02deeb586b9f2fb31e7d0a0919946b857');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (3, 2, '\x6cfdcb9e6e7fe0da194933b066c4f2af6a84700065b1fa27464786a62df70c24');
INSERT INTO public.line_hashes (attempt_id, seq, sha256) VALUES (3, 3, '\x291fb95331fc5a51cded5bfb40859a2898b9faf657266100dd54007db263445f');


--
-- Data for Name: line_skips; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: operator_actions; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.operator_actions (action_id, book_id, engine_run_id, action, by_whom, reason, at, evidence) OVERRIDING SYSTEM VALUE VALUES (1, 'book-2', '0b6c1f3e-0002-4000-8000-000000000001', 'release', 'release-vectors', 'looked at the line: still malformed', '2026-12-03 19:15:36.108289+00', '{"error": {"seq": 4, "kind": "malformed", "detail": "money field committed_micro_usd must be a non-negative JSON integer of micro-USD, found a string", "offset": 390}, "attempt_state": "quarantined"}');


--
-- Data for Name: projection_failures; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: projection_tracking; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: projections; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: pruned_streams; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: run_units; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.run_units (run_id, unit, unit_index, attempt_id, seq) VALUES (1, 'unit-0001', 0, 1, 6);
INSERT INTO public.run_units (run_id, unit, unit_index, attempt_id, seq) VALUES (1, 'unit-0002', 1, 1, 11);
INSERT INTO public.run_units (run_id, unit, unit_index, attempt_id, seq) VALUES (1, 'unit-0003', 2, 2, 6);
INSERT INTO public.run_units (run_id, unit, unit_index, attempt_id, seq) VALUES (2, 'unit-0001', 0, 3, 2);


--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.runs (run_id, book_id, state, reason, stop, refusal, outcome, exit_code, committed_micro_usd, shortfall_micro_usd, settled_micro_usd, progress, created_at, updated_at) OVERRIDING SYSTEM VALUE VALUES (1, 'book-1', 'completed', NULL, NULL, NULL, 'completed', 0, 1500000, NULL, NULL, '[["draft", {"done": 3, "total": 3}], ["edit", {"done": 3, "total": 3}]]', '2026-12-03 19:15:36.008213+00', '2026-12-03 19:15:36.057408+00');
INSERT INTO public.runs (run_id, book_id, state, reason, stop, refusal, outcome, exit_code, committed_micro_usd, shortfall_micro_usd, settled_micro_usd, progress, created_at, updated_at) OVERRIDING SYSTEM VALUE VALUES (2, 'book-2', 'running', NULL, NULL, NULL, NULL, NULL, 400000, NULL, NULL, '[]', '2026-12-03 19:15:36.069384+00', '2026-12-03 19:15:36.069384+00');


--
-- Data for Name: stream_starts; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Name: attempts_attempt_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.attempts_attempt_id_seq', 3, true);


--
-- Name: operator_actions_action_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.operator_actions_action_id_seq', 1, true);


--
-- Name: runs_run_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.runs_run_id_seq', 2, true);


--
-- Name: attempts attempts_book_id_engine_run_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_book_id_engine_run_id_key UNIQUE (book_id, engine_run_id);


--
-- Name: attempts attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (attempt_id);


--
-- Name: book_problems book_problems_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.book_problems
    ADD CONSTRAINT book_problems_pkey PRIMARY KEY (book_id, kind);


--
-- Name: books books_path_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.books
    ADD CONSTRAINT books_path_key UNIQUE (path);


--
-- Name: books books_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.books
    ADD CONSTRAINT books_pkey PRIMARY KEY (book_id);


--
-- Name: ingest_schema_version ingest_schema_version_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ingest_schema_version
    ADD CONSTRAINT ingest_schema_version_pkey PRIMARY KEY (version);


--
-- Name: line_hashes line_hashes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.line_hashes
    ADD CONSTRAINT line_hashes_pkey PRIMARY KEY (attempt_id, seq);


--
-- Name: line_skips line_skips_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.line_skips
    ADD CONSTRAINT line_skips_pkey PRIMARY KEY (attempt_id, seq);


--
-- Name: operator_actions operator_actions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_actions
    ADD CONSTRAINT operator_actions_pkey PRIMARY KEY (action_id);


--
-- Name: projection_failures projection_failures_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projection_failures
    ADD CONSTRAINT projection_failures_pkey PRIMARY KEY (book_id, engine_run_id);


--
-- Name: projection_tracking projection_tracking_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projection_tracking
    ADD CONSTRAINT projection_tracking_pkey PRIMARY KEY (projection, attempt_id);


--
-- Name: projections projections_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projections
    ADD CONSTRAINT projections_pkey PRIMARY KEY (name);


--
-- Name: pruned_streams pruned_streams_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pruned_streams
    ADD CONSTRAINT pruned_streams_pkey PRIMARY KEY (book_id, engine_run_id);


--
-- Name: run_units run_units_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_units
    ADD CONSTRAINT run_units_pkey PRIMARY KEY (run_id, unit);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (run_id);


--
-- Name: stream_starts stream_starts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.stream_starts
    ADD CONSTRAINT stream_starts_pkey PRIMARY KEY (book_id, engine_run_id);


--
-- Name: attempts_compaction_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX attempts_compaction_pending ON public.attempts USING btree (attempt_id) WHERE compaction_pending;


--
-- Name: attempts_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX attempts_run ON public.attempts USING btree (run_id);


--
-- Name: attempts_to_compact; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX attempts_to_compact ON public.attempts USING btree (changed_at) WHERE ((compacted_seq = 0) AND (last_seq > 0) AND (state = ANY (ARRAY['finished'::text, 'superseded'::text, 'exited'::text, 'disowned'::text, 'abandoned'::text])));


--
-- Name: operator_actions_book; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX operator_actions_book ON public.operator_actions USING btree (book_id, action_id);


--
-- Name: pruned_streams_cleanup; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX pruned_streams_cleanup ON public.pruned_streams USING btree (attempt_id) WHERE cleanup_pending;


--
-- Name: runs_book; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_book ON public.runs USING btree (book_id, run_id);


--
-- Name: runs_ended; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_ended ON public.runs USING btree (updated_at) WHERE (state = ANY (ARRAY['completed'::text, 'failed'::text, 'refused'::text]));


--
-- Name: books books_changed_notify; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER books_changed_notify AFTER UPDATE OF scan_epoch ON public.books FOR EACH ROW WHEN ((old.scan_epoch IS DISTINCT FROM new.scan_epoch)) EXECUTE FUNCTION public.platform_ingest_book_changed();


--
-- Name: attempts attempts_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- Name: attempts attempts_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.attempts
    ADD CONSTRAINT attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(run_id);


--
-- Name: book_problems book_problems_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.book_problems
    ADD CONSTRAINT book_problems_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- Name: operator_actions operator_actions_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_actions
    ADD CONSTRAINT operator_actions_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- Name: projection_failures projection_failures_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projection_failures
    ADD CONSTRAINT projection_failures_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- Name: projection_tracking projection_tracking_projection_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.projection_tracking
    ADD CONSTRAINT projection_tracking_projection_fkey FOREIGN KEY (projection) REFERENCES public.projections(name) ON DELETE CASCADE;


--
-- Name: pruned_streams pruned_streams_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pruned_streams
    ADD CONSTRAINT pruned_streams_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- Name: runs runs_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- Name: stream_starts stream_starts_book_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.stream_starts
    ADD CONSTRAINT stream_starts_book_id_fkey FOREIGN KEY (book_id) REFERENCES public.books(book_id);


--
-- PostgreSQL database dump complete
--

