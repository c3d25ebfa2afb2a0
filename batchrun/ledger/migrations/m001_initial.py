"""The first schema: the fact tables and their indexes. Tables hold facts as they happened: the
runs (one row per writing invocation; judge retries are bounded per run), datasets, documents
(and the file cache document_files), tasks, policies, the config snapshot config_routes, cells,
requests, batches and the requests each holds, every result line downloaded, and every judgment
parsed. Nothing is overwritten; what a state *is* comes from the views (m002 on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    statements = [
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)""",
        # One row per batchrun invocation that writes; judge retries are bounded per run.
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY, command TEXT NOT NULL, started_at REAL NOT NULL,
            ended_at REAL, pid INTEGER, batchrun_version TEXT, outcome TEXT)""",
        """CREATE TABLE datasets (
            sha256 TEXT PRIMARY KEY, path TEXT NOT NULL, n_tasks INTEGER NOT NULL, first_seen REAL NOT NULL)""",
        """CREATE TABLE documents (
            sha256 TEXT PRIMARY KEY, name TEXT NOT NULL, chars INTEGER NOT NULL,
            bytes INTEGER NOT NULL, cjk INTEGER NOT NULL)""",
        # Cache of (path, size, mtime) -> sha256, so status/collect don't re-hash the corpus.
        """CREATE TABLE document_files (
            path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL)""",
        # The current version of each task (replaced when the dataset changes; requests keep the old).
        """CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY, position INTEGER NOT NULL, question TEXT NOT NULL,
            corpus_file TEXT NOT NULL, doc_sha256 TEXT NOT NULL, rubric_json TEXT NOT NULL,
            rubric_total REAL NOT NULL, fields_json TEXT NOT NULL, task_sha256 TEXT NOT NULL,
            dataset_sha256 TEXT NOT NULL)""",
        """CREATE TABLE policies (
            fingerprint TEXT PRIMARY KEY, stage TEXT NOT NULL, route TEXT NOT NULL,
            provider TEXT NOT NULL, model TEXT NOT NULL, policy_json TEXT NOT NULL, first_seen REAL NOT NULL)""",
        # Snapshot of the current config: which routes, their role and current policy.
        """CREATE TABLE config_routes (
            route TEXT PRIMARY KEY, role TEXT NOT NULL, policy_fp TEXT NOT NULL,
            provider TEXT NOT NULL, model TEXT NOT NULL, transport TEXT NOT NULL,
            endpoint_host TEXT, panel_position INTEGER)""",
        # One row per (generation policy, task): the CJK rule, the cap and the scope decision.
        """CREATE TABLE cells (
            policy_fp TEXT NOT NULL, task_id TEXT NOT NULL, route TEXT NOT NULL,
            doc_sha256 TEXT NOT NULL, doc_chars INTEGER NOT NULL, cjk INTEGER NOT NULL,
            cap INTEGER NOT NULL, cap_source TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('send', 'out_of_context_scope')),
            custom_id TEXT, task_sha256 TEXT NOT NULL, planned_at REAL NOT NULL,
            PRIMARY KEY (policy_fp, task_id))""",
        # One row per distinct request (deterministic custom_id); attempts are batch_requests rows.
        """CREATE TABLE requests (
            custom_id TEXT PRIMARY KEY, stage TEXT NOT NULL CHECK (stage IN ('gen', 'judge')),
            route TEXT NOT NULL, task_id TEXT NOT NULL, policy_fp TEXT NOT NULL,
            parent_custom_id TEXT, parent_result_id INTEGER,
            max_retries INTEGER NOT NULL, max_resubmits INTEGER NOT NULL,
            prompt_chars INTEGER NOT NULL, est_input_tokens INTEGER NOT NULL,
            est_output_tokens INTEGER NOT NULL, created_at REAL NOT NULL)""",
        """CREATE INDEX requests_parent ON requests (parent_custom_id)""",
        """CREATE INDEX requests_route ON requests (route, stage)""",
        # A local batch: one request file under jobs/<id>/, and what became of it at the provider.
        """CREATE TABLE batches (
            id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, route TEXT NOT NULL, stage TEXT NOT NULL,
            provider TEXT NOT NULL, transport TEXT NOT NULL, model TEXT NOT NULL,
            status TEXT NOT NULL, dir TEXT NOT NULL, request_file TEXT NOT NULL,
            sha256 TEXT, bytes INTEGER, n_requests INTEGER, est_input_tokens INTEGER,
            est_output_tokens INTEGER, est_cost REAL,
            provider_file_id TEXT, provider_batch_id TEXT, provider_status TEXT, provider_state TEXT, quota INTEGER,
            counts_json TEXT, error TEXT, last_seen_json TEXT, endpoint_host TEXT,
            run_id INTEGER, created_at REAL NOT NULL, creating_at REAL, submitted_at REAL,
            ended_at REAL, downloaded_at REAL, collected_at REAL, result_files_json TEXT)""",
        """CREATE TABLE batch_requests (
            batch_id TEXT NOT NULL, custom_id TEXT NOT NULL, position INTEGER NOT NULL,
            PRIMARY KEY (batch_id, custom_id))""",
        """CREATE INDEX batch_requests_custom_id ON batch_requests (custom_id)""",
        # Every result line ever reconciled (or synthesised for a request a batch never answered).
        """CREATE TABLE results (
            id INTEGER PRIMARY KEY, batch_id TEXT NOT NULL, custom_id TEXT NOT NULL,
            kind TEXT NOT NULL, text TEXT, finish_reason TEXT,
            input_tokens INTEGER, output_tokens INTEGER, reasoning_tokens INTEGER, cached_tokens INTEGER,
            error_type TEXT, error_message TEXT, raw_json TEXT, collected_at REAL NOT NULL,
            run_id INTEGER, cost REAL,
            UNIQUE (batch_id, custom_id))""",
        """CREATE INDEX results_custom_id ON results (custom_id)""",
        # The parsed verdict of each judge result line that returned text.
        """CREATE TABLE judgments (
            result_id INTEGER PRIMARY KEY, custom_id TEXT NOT NULL, total REAL, rubric_total REAL NOT NULL,
            score REAL, points_awarded_json TEXT, parse_error TEXT)""",
    ]
    for sql in statements:
        db.execute(sql)
