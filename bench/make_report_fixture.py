"""Build tests/fixtures/report-project: a small state.db with every cell state, and the report it gives.

    python bench/make_report_fixture.py            # rebuild the state.db and the expected reports
    python bench/make_report_fixture.py --expected # only re-render the expected reports from the
                                                   # committed state.db (with the code checked out)

The state.db comes from bench/scale.py's builder (batchrun's own sync_state and collect_batch over
scripted provider result files), shrunk to 40 tasks x 4 contestant routes (1,200 results) and a 3-judge panel:
ok, retried, refusal, empty, judging, pending, blocked, waiting and out-of-context cells, live
batches, and history (an older judge panel, retired routes, older policies). tests/test_report_fixture.py
checks that `batchrun report` gives exactly the committed bytes for it, so a change to the queries
behind the report (issue 15: speed) cannot change a published number. The expected files were
rendered by the code *before* those changes; re-render them only for an intended change of output.

The corpus and dataset are not kept (the report reads state.db and the config only); the config's
paths are made relative to the fixture folder, and `results.raw_json` (the provider's line, kept
for audit; nothing the report reads) is dropped to keep the file small. In the expected files
batchrun's version is replaced by {VERSION} and the config's path by {CONFIG} (the test runs on
a copy), so a version bump or another checkout does not break the comparison.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "report-project"
FORMATS = {"md": "report.md", "json": "report.json", "csv": "report.csv"}


def build() -> None:
    scale.N_TASKS, scale.N_SMALL_DOCS, scale.N_LONG_TASKS = 40, 6, 2
    scale.SHARED_CORPUS = Path("/nonexistent")  # synthetic text, the same on every machine
    work = Path(tempfile.mkdtemp(prefix="batchrun-report-fixture-"))
    try:
        inputs = scale.write_inputs(work / "inputs")
        builder = scale.Builder(work / "project", inputs, 4, 1_200, seed=15)
        built = builder.build()
        if FIXTURE.exists():
            shutil.rmtree(FIXTURE)
        FIXTURE.mkdir(parents=True)
        con = sqlite3.connect(work / "project" / "state.db")
        # The raw lines are kept for audit only (nothing the report reads): dropped to keep the fixture small.
        con.execute("UPDATE results SET raw_json = NULL")
        con.commit()
        con.execute("VACUUM INTO ?", [str(FIXTURE / "state.db")])
        con.close()
        config = json.loads(Path(built["config"]).read_text())
        config["paths"] = {"dataset": "data/tasks.json", "corpus": "corpus", "state": "state.db", "jobs": "jobs", "results": "results"}
        (FIXTURE / "batchrun.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        print("built:", built["counts"], built["history"], file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(fmt: str, project: Path) -> str:
    r = subprocess.run([sys.executable, "-m", "batchrun", "--config", str(project / "batchrun.json"), "-q", "report", "--format", fmt],
                       capture_output=True, text=True, cwd=project)
    if r.returncode != 0:
        raise SystemExit(f"report --format {fmt} exited {r.returncode}: {r.stderr}")
    return r.stdout


def expected() -> None:
    from batchrun import __version__
    from batchrun.ledger.store import Store

    # Rendered from a copy upgraded by a writer, as the test does: the committed state.db keeps the
    # schema it was built with, so the test also checks that later migrations change no number.
    work = Path(tempfile.mkdtemp(prefix="batchrun-report-expected-"))
    try:
        for name in ("batchrun.json", "state.db"):
            shutil.copyfile(FIXTURE / name, work / name)
        Store(work / "state.db").close()
        for fmt, name in FORMATS.items():
            text = render(fmt, work)
            text = text.replace(str(work / "batchrun.json"), "{CONFIG}").replace(__version__, "{VERSION}")
            (FIXTURE / f"expected-{name}").write_text(text, encoding="utf-8")
            print(f"wrote expected-{name} ({len(text):,} characters)", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if "--expected" not in sys.argv[1:]:
        build()
    expected()
