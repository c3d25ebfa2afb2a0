"""publish: what batchrun makes of state.db for people to read, and the checks of it.

Nothing is scored here: the views in state.db (ledger) are the definition of every number. This
stage shapes them: the results/ files and the report's data with their provenance (outputs;
results_files writes a file only when its bytes change), the run manifest (manifest) and
`batchrun verify` (verify), the statistics (stats, student_t: pure functions with the document
as the unit; agreement: between the judges; analysis: the report's statistics from state.db),
what changed since the last refresh (snapshots), the report as Markdown, CSV or JSON (report),
the static site (site, with a page per route and per task: route_page, task_page, and the
document excerpts task pages show: excerpt; over html and svg),
and what a run publishes at its end (end_of_run). It sits below the run because collect and
refresh write results files and the site.

May import: base, providers, protocol, ledger.
"""
