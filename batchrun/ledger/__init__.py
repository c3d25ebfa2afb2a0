"""ledger: state.db, everything batchrun knows, and what the current inputs still need.

Opening it (store; one writer at a time: lock), its schema (migrations/: one migration per file,
applied in order by name; schema_doc writes docs/schema.md from them), a local batch's lifecycle
(lifecycle), a command's inputs resolved once, with state.db's cache of document measurements
(inputs), the deterministic custom_ids (ids), recording the current inputs and queueing
judgments (sync), the requests the current config wants and which are pending (pending), the
views' rows kept current as state.db changes, so a reading command need not evaluate them (kept),
refusing a resume over a changed input (resume), the maintainer's recorded decisions
(decisions), why a route cannot finish (diagnosis), and what it cost (cost).

May import: base, providers, protocol.
"""
