"""results/manifest.json and `batchrun verify`: a published leaderboard checked against its inputs."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Project, small_project

from batchrun.cli import cli


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("manifest") / "demo"
    r = CliRunner().invoke(cli, ["demo", "--dir", str(folder)])
    assert r.exit_code == 0, r.output
    return folder


def verify(folder: Path, *args: str) -> object:
    return CliRunner().invoke(cli, ["--config", str(folder / "batchrun.toml"), "verify", *args])


def test_the_demo_writes_a_manifest_of_every_input_and_output(demo: Path) -> None:
    m = json.loads((demo / "results" / "manifest.json").read_text())
    assert m["format"] == "batchrun-manifest/3" and m["batchrun_version"]
    assert m["dataset"]["records"] == 30 and len(m["dataset"]["sha256"]) == 64
    assert len(m["documents"]) == 10 and all(d["chars"] > 0 and len(d["sha256"]) == 64 for d in m["documents"])
    assert m["config"]["canonical"]["judging"]["panel"] and len(m["config"]["sha256"]) == 20
    assert {r["role"] for r in m["routes"]} == {"contestant", "judge"} and all(r["policy_fingerprint"] for r in m["routes"])
    assert set(m["prompt_templates"]) == {"generation_sha256", "judge_sha256"}
    assert m["request_files"] and all(f["provider_batch_id"] and f["lines"] > 0 for f in m["request_files"])
    names = {Path(f["path"]).name for f in m["results_files"]}
    assert "gpt-5.5.scores.json" in names and "gpt-5.5.responses.json" in names
    assert m["rehearsal"]  # the demo runs on the emulator, and says so
    # Every provider result and error file downloaded, with its sha256 as downloaded (issue 26).
    assert m["provider_files"] and {f["batch"] for f in m["provider_files"]} == {f["batch"] for f in m["request_files"]}
    assert all(f["path"].startswith("jobs/") and len(f["sha256"]) == 64 for f in m["provider_files"])
    assert (m["protocol"], m["protocol_note"]) == ("wildtrace", None)  # the demo runs the protocol's panel
    # The commit of the checkout batchrun runs from (these tests run from one where git is there).
    import shutil
    import subprocess

    import batchrun
    checkout = Path(batchrun.__file__).resolve().parent.parent
    if (checkout / ".git").exists() and shutil.which("git"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                              env=env).stdout.strip()
        # (git refuses a checkout another user owns, "dubious ownership": no commit to name then)
        assert m["git_commit"] == (head or None)
        changed = subprocess.run(["git", "-C", str(checkout), "diff", "HEAD", "--quiet"], env=env).returncode == 1
        assert m["git_dirty"] == (changed if head else None)
    else:
        assert m["git_commit"] is None and m["git_dirty"] is None


def test_a_dirty_checkout_is_recorded_as_such_beside_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest named a checkout with uncommitted changes by its clean HEAD (the review): its
    git_dirty says whether tracked files differed from git_commit (untracked files do not count,
    as for `git describe --dirty`); git runs without the caller's GIT_* variables."""
    import shutil
    import subprocess

    from batchrun.publish.manifest import _git_state

    if not shutil.which("git"):
        pytest.skip("git is not installed")
    repo = tmp_path / "checkout"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
                              capture_output=True, text=True, env=env, check=True).stdout.strip()

    git("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))  # a hook's or CI's: not read
    assert _git_state(repo) == (head, False)
    (repo / "notes.txt").write_text("untracked\n")
    assert _git_state(repo) == (head, False)
    (repo / "code.py").write_text("x = 2\n")
    assert _git_state(repo) == (head, True)
    git("add", "code.py")  # staged, not committed: still not the commit
    assert _git_state(repo) == (head, True)
    assert _git_state(tmp_path) == (None, None)  # no checkout


def test_verify_passes_on_the_demo(demo: Path) -> None:
    r = verify(demo)
    assert r.exit_code == 0, r.output
    assert "verified:" in r.output and "rehearsal" in r.output


def test_verify_takes_the_project_folder_too(demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify demo-run` and `verify .` inside it said "No manifest.json in demo-run" (found by a
    newcomer): a project folder means its results folder."""
    for args in ((str(demo),), (str(demo / "results"),)):
        r = verify(demo, *args)
        assert r.exit_code == 0, r.output
        assert "verified:" in r.output and str(demo / "results" / "manifest.json") in r.output
    monkeypatch.chdir(demo)
    r = CliRunner().invoke(cli, ["verify", "."])  # the config found in the folder, as a user runs it
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path)  # outside the project: the project named is checked with its own config
    r = CliRunner().invoke(cli, ["verify", str(demo)])
    assert r.exit_code == 0 and "verified:" in r.output, r.output
    # A folder that is neither: the error says what DIR may be.
    r = verify(demo, str(tmp_path))
    assert r.exit_code == 1 and f"No manifest.json in {tmp_path}." in r.output
    assert "DIR is that results folder or the project's folder" in r.output


@pytest.mark.parametrize("here_has_state", [False, True], ids=["config-only", "own-state-db"])
def test_verify_of_a_results_folder_from_another_project_s_folder_uses_its_writer_s_config(
        here_has_state: bool, demo: Path, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify demo-run/results` from the clone's root, as the README's example reads, was checked
    against the root's batchrun.toml (the paper's config, no state.db) and named 44 files missing:
    a results folder named with no --config is checked with the config of the project that wrote
    it, found where its manifest says (the folder its results files' paths are relative to)."""
    small_project(project)
    if here_has_state:
        assert project.run("plan").exit_code == 0
    monkeypatch.chdir(project.root)
    monkeypatch.delenv("BATCHRUN_CONFIG", raising=False)
    r = CliRunner().invoke(cli, ["verify", str(demo / "results")])
    assert r.exit_code == 0, r.output
    assert "verified:" in r.output and "MISMATCH" not in r.output
    # A results folder whose project config is gone: this folder's config, as before (files only).
    moved = project.root / "published"
    shutil.copytree(demo / "results", moved / "results")
    r = CliRunner().invoke(cli, ["verify", str(moved / "results")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    # The manifest is data: a config path that leaves its project, or results paths deeper than
    # the file system, are not followed (a named mismatch, no traceback).
    (moved / "batchrun.toml").write_text((demo / "batchrun.toml").read_text())
    manifest = moved / "results" / "manifest.json"
    m = json.loads(manifest.read_text())
    for edit in ({"config": {**m["config"], "path": "../" * 30 + "etc/passwd"}},
                 {"results_files": [{"path": "a/" * 200 + "x.json", "sha256": "0"}]},
                 {"config": {**m["config"], "path": str(demo / "batchrun.toml")}},
                 {"config": "batchrun.toml", "results_files": [3, None]}):
        manifest.write_text(json.dumps({**m, **edit}))
        r = CliRunner().invoke(cli, ["verify", str(moved / "results")])
        assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.output, r.exception)
        assert "Traceback" not in r.output and "Error:" in r.output, r.output


@pytest.mark.parametrize("target", ["corpus", "request", "results"])
def test_verify_names_the_file_after_one_byte_changes(demo: Path, tmp_path: Path, target: str) -> None:
    import shutil

    copy = tmp_path / "demo"
    shutil.copytree(demo, copy)
    m = json.loads((copy / "results" / "manifest.json").read_text())
    rel = {"corpus": m["documents"][0]["path"], "request": m["request_files"][0]["path"],
           "results": m["results_files"][0]["path"]}[target]
    path = copy / rel  # paths in the manifest are relative to the project: the copy's own files
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one byte
    path.write_bytes(bytes(data))
    r = verify(copy)
    assert r.exit_code == 1, r.output
    what = {"corpus": "the document", "request": "the request file", "results": "the results file"}[target]
    algorithm = "blake3" if target == "request" else "sha256"  # request files: checksums.py
    assert f"MISMATCH: {what} {rel} has {algorithm}" in r.output
    assert "checks failed" in r.output and "Traceback" not in r.output


def _copy(demo: Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    import shutil

    copy = tmp_path / "demo"
    shutil.copytree(demo, copy)
    return copy, json.loads((copy / "results" / "manifest.json").read_text())


def _rewrite_manifest(copy: Path, m: dict[str, Any]) -> None:
    (copy / "results" / "manifest.json").write_text(json.dumps(m, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def test_verify_cannot_be_forged_by_putting_an_edited_file_s_sha256_into_the_manifest(demo: Path, tmp_path: Path) -> None:
    """Issue 26: an edited scores file whose new sha256 is put into manifest.json. state.db still
    holds what collect wrote (the scores file's and the manifest's own sha256), and the numbers
    recomputed from state.db differ from the ones published."""
    import hashlib

    copy, m = _copy(demo, tmp_path)
    rel = next(f["path"] for f in m["results_files"] if f["path"].endswith("gpt-5.5.scores.json"))
    scores = json.loads((copy / rel).read_text())
    true_overall = scores["overall"]
    scores["overall"] = scores["all_tasks_overall"] = 0.999
    (copy / rel).write_text(json.dumps(scores, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    next(f for f in m["results_files"] if f["path"] == rel)["sha256"] = hashlib.sha256((copy / rel).read_bytes()).hexdigest()
    _rewrite_manifest(copy, m)
    r = verify(copy)
    assert r.exit_code == 1, r.output
    assert f"MISMATCH: the results file {rel} is not the one collect wrote" in r.output
    assert "MISMATCH: the manifest results/manifest.json is not the one collect wrote" in r.output
    assert f"MISMATCH: the results file {rel} publishes overall = 0.999; state.db gives {true_overall!r}" in r.output
    assert "Traceback" not in r.output

    # Forging state.db's record of the file too leaves the numbers, recomputed from state.db.
    state = copy / "state.db"
    with sqlite3.connect(state) as conn:
        new = hashlib.sha256((copy / rel).read_bytes()).hexdigest()
        assert conn.execute("UPDATE results_files SET sha256 = ? WHERE path LIKE ?", [new, f"%{rel}"]).rowcount == 1
        conn.execute("UPDATE results_files SET sha256 = ? WHERE path LIKE '%results/manifest.json'",
                     [hashlib.sha256((copy / "results" / "manifest.json").read_bytes()).hexdigest()])
    conn.close()
    r = verify(copy)
    assert r.exit_code == 1 and "is not the one collect wrote" not in r.output, r.output
    assert f"MISMATCH: the results file {rel} publishes overall = 0.999" in r.output
    assert f"MISMATCH: the results file {rel} publishes all_tasks_overall = 0.999" in r.output


def test_verify_covers_the_downloaded_provider_answers(demo: Path, tmp_path: Path) -> None:
    """Issue 26: a downloaded provider result file (jobs/*/output.jsonl) edited after collect is
    named, against the manifest and against state.db's record of it as downloaded; so is one
    whose edit is copied into the manifest, and one dropped from the manifest."""
    import hashlib

    copy, m = _copy(demo, tmp_path)
    f = next(f for f in m["provider_files"] if f["path"].endswith(".jsonl"))
    path = copy / f["path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    r = verify(copy)
    assert r.exit_code == 1, r.output
    assert f"MISMATCH: the provider file {f['path']} (batch {f['batch']}) has sha256" in r.output
    assert f"MISMATCH: the provider file {f['path']} (batch {f['batch']}) is not the one poll downloaded" in r.output

    f["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()  # the edit copied into the manifest
    _rewrite_manifest(copy, m)
    r = verify(copy)
    assert r.exit_code == 1 and f"the provider file {f['path']} (batch {f['batch']}) has sha256" not in r.output
    assert f"MISMATCH: the provider file {f['path']} (batch {f['batch']}) is not the one poll downloaded" in r.output

    m["provider_files"].remove(f)  # or left out of the manifest
    _rewrite_manifest(copy, m)
    r = verify(copy)
    assert r.exit_code == 1 and f"MISMATCH: the provider file {f['path']} (batch {f['batch']}) is not listed in the manifest" in r.output
    assert "Traceback" not in r.output


def test_verify_reads_a_format_1_manifest_against_a_state_db_from_before_blake3(demo: Path, tmp_path: Path) -> None:
    """A project published before m018_request_blake3: its manifest lists each request file's
    sha256 (format /1) and its state.db has no blake3 column. verify checks it as it is: it does
    not ask for the schema upgrade (a collect, which would rewrite the manifest being verified)."""
    import hashlib
    import shutil

    copy = tmp_path / "demo"
    shutil.copytree(demo, copy)
    manifest_path = copy / "results" / "manifest.json"
    m = json.loads(manifest_path.read_text())
    m["format"] = "batchrun-manifest/1"
    for f in m["request_files"]:
        f["sha256"] = hashlib.sha256((copy / f["path"]).read_bytes()).hexdigest()
        del f["blake3"]
    manifest_path.write_text(json.dumps(m))
    state = next(copy.rglob("state.db"))
    conn = sqlite3.connect(state)
    with conn:
        for f in m["request_files"]:
            conn.execute("UPDATE batches SET sha256 = ? WHERE id = ?", [f["sha256"], f["batch"]])
        conn.execute("ALTER TABLE batches DROP COLUMN blake3")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm018_request_blake3'")
    conn.close()
    before = state.read_bytes()
    r = verify(copy)
    assert r.exit_code == 0, r.output
    assert "verified:" in r.output
    assert state.read_bytes() == before  # not upgraded


def test_verify_refuses_a_manifest_format_it_does_not_read(demo: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "demo"
    shutil.copytree(demo, copy)
    manifest_path = copy / "results" / "manifest.json"
    m = json.loads(manifest_path.read_text())
    m["format"] = "batchrun-manifest/9"
    manifest_path.write_text(json.dumps(m))
    r = verify(copy)
    assert r.exit_code == 1 and "batchrun-manifest/9" in r.output and "batchrun_version" in r.output
    assert "Traceback" not in r.output
    manifest_path.write_text("{not json")
    r = verify(copy)
    assert r.exit_code == 1 and "is not JSON" in r.output and "Traceback" not in r.output


def test_verify_without_a_manifest_says_where_it_comes_from(tmp_path: Path, demo: Path) -> None:
    r = verify(demo, str(tmp_path))
    assert r.exit_code == 1 and "No manifest.json" in r.output and "batchrun collect" in r.output



def _stats(results: Path) -> dict[str, tuple[int, int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(results.glob("*.json"))}


def test_a_collect_with_nothing_new_leaves_results_files_untouched_and_rewrites_a_deleted_or_edited_one(
        project: Project, emulator: Any) -> None:
    small_project(project)
    r = project.run("refresh", "--interval", "0", emulator=emulator)
    assert r.exit_code == 0, r.output
    results = project.results_dir
    files = sorted(results.glob("*.json"))
    assert len(files) == 2 * 3 + 1 and results / "manifest.json" in files  # 3 contestant routes
    content = {p.name: p.read_bytes() for p in files}
    before = _stats(results)

    def collect() -> None:
        r = project.run("collect", emulator=emulator)
        assert r.exit_code == 0 and "collected 0 batch(es), 0 result line(s)" in r.output, r.output

    # Nothing new: every file is left as it is (same inode, mtime and size), the manifest too.
    collect()
    assert _stats(results) == before
    # A deleted file and a hand-edited one (same size, even its old mtime) are written again, as
    # they were; the others are left alone.
    responses = next(p for p in files if p.name.endswith(".responses.json"))
    scores = next(p for p in files if p.name.endswith(".scores.json"))
    responses.unlink()
    edited = bytearray(content[scores.name])
    edited[len(edited) // 2] ^= 0x01  # one bit of one byte
    scores.write_bytes(bytes(edited))
    os.utime(scores, ns=(before[scores.name][1], before[scores.name][1]))
    collect()
    after = _stats(results)
    assert responses.read_bytes() == content[responses.name] and scores.read_bytes() == content[scores.name]
    assert after[scores.name][:2] != before[scores.name][:2]
    assert {k: v for k, v in after.items() if k not in (responses.name, scores.name)} == \
           {k: v for k, v in before.items() if k not in (responses.name, scores.name)}
    # A record that does not match the file's data (what a crash after writing the file, before
    # recording it, leaves): the file is written again, the same bytes.
    with sqlite3.connect(project.state_path) as db:
        assert db.execute("UPDATE results_files SET fingerprint = 'stale' WHERE path = ?", [str(scores)]).rowcount == 1
    collect()
    assert _stats(results)[scores.name][:2] != after[scores.name][:2] and scores.read_bytes() == content[scores.name]
    assert {p.name: p.read_bytes() for p in results.glob("*.json")} == content


def test_verify_of_another_projects_results_says_so_with_the_fix(demo: Path, project: Project) -> None:
    """`verify DIR` given another project's results folder checked them against this folder's
    state.db and reported every number as a mismatch, as if they had been tampered with (the
    walk-through): the manifest names the state.db that wrote it (meta store_id)."""
    m = json.loads((demo / "results" / "manifest.json").read_text())
    demo_store = sqlite3.connect(demo / "state.db").execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
    assert m["store_id"] == demo_store
    small_project(project)
    assert project.run("plan").exit_code == 0  # this project's own state.db
    r = CliRunner().invoke(cli, ["--config", str(project.config_path), "verify", str(demo / "results")])
    assert r.exit_code == 1, r.output
    assert f"The results in {demo / 'results'} were written by another state.db (store {demo_store})" in r.output
    assert f"Hint: Run it with that project's config: `batchrun --config {demo.resolve() / 'batchrun.toml'} verify" in r.output
    assert "MISMATCH" not in r.output and "Traceback" not in r.output
    # As the hint says, it verifies.
    r = CliRunner().invoke(cli, ["--config", str(demo / "batchrun.toml"), "verify", str(demo / "results")])
    assert r.exit_code == 0 and "verified:" in r.output, r.output
