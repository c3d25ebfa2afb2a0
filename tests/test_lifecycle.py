"""The batch lifecycle: every move goes through lifecycle.move, which refuses the ones not listed."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchrun.ledger import lifecycle
from batchrun.ledger.lifecycle import TRANSITIONS, Status, TransitionError, move, move_all, new_batch, record
from batchrun.ledger.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def _batch(store: Store, batch_id: str = "000001-r-gen", seq: int = 1) -> str:
    with store.db.atomic():
        new_batch(store, id=batch_id, seq=seq, route="r", stage="gen", provider="openai", transport="batch", model="m",
                  dir="/nowhere", request_file="/nowhere/requests.jsonl", created_at=0.0)
    return batch_id


def _status(store: Store, batch_id: str) -> str:
    return store.scalar("SELECT status FROM batches WHERE id = ?", [batch_id])


def test_the_main_line_is_a_sequence_of_allowed_moves(store: Store) -> None:
    b = _batch(store)
    assert _status(store, b) == "writing"
    for to in (Status.PLANNED, Status.UPLOADING, Status.UPLOADED, Status.CREATING, Status.IN_FLIGHT, Status.ENDED,
               Status.DOWNLOADED, Status.COLLECTED):
        move(store, b, to)
        assert _status(store, b) == to.value


def test_a_move_not_in_the_table_is_refused_and_changes_nothing(store: Store) -> None:
    b = _batch(store)
    move(store, b, Status.PLANNED, n_requests=3)
    with pytest.raises(TransitionError, match="planned -> collected"):
        move(store, b, Status.COLLECTED, collected_at=1.0)
    row = store.one("SELECT status, collected_at, n_requests FROM batches WHERE id = ?", [b])
    assert row == {"status": "planned", "collected_at": None, "n_requests": 3}
    with pytest.raises(TransitionError, match="no such batch"):
        move(store, "missing", Status.PLANNED)


def test_final_states_have_no_way_out(store: Store) -> None:
    finals = {s for s, targets in TRANSITIONS.items() if not targets}
    assert finals == {Status.COLLECTED, Status.ABANDONED, Status.SUPERSEDED, Status.REFUSED, Status.WITHDRAWN}
    assert set(TRANSITIONS) == set(Status)


def test_groups_are_made_of_states_and_live_ones_can_still_move(store: Store) -> None:
    for group in (lifecycle.LIVE, lifecycle.NOT_CREATED, lifecycle.TO_FOLLOW, lifecycle.QUEUED, lifecycle.SPENDING,
                  lifecycle.STARTED):
        assert set(group) <= set(Status)
    assert all(TRANSITIONS[s] for s in lifecycle.LIVE)
    assert Status.WRITING not in lifecycle.LIVE  # a crash while writing leaves the requests pending


def test_record_never_moves_and_redacts(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _batch(store)
    with pytest.raises(TransitionError):
        record(store, b, status="planned")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    from batchrun.base.redaction import know_key_variables

    know_key_variables(["OPENAI_API_KEY"])
    record(store, b, error="Incorrect API key provided: sk-test-0123456789abcdef")
    assert store.scalar("SELECT error FROM batches WHERE id = ?", [b]) == "Incorrect API key provided: [REDACTED]"
    assert _status(store, b) == "writing"


def test_move_all_moves_only_the_batches_in_the_source_state(store: Store) -> None:
    a, b = _batch(store, "000001-r-gen", 1), _batch(store, "000002-r-gen", 2)
    move(store, a, Status.PLANNED)
    moved = move_all(store, Status.PLANNED, Status.SUPERSEDED, error="config changed before upload")
    assert moved == 1
    assert (_status(store, a), _status(store, b)) == ("superseded", "writing")
    with pytest.raises(TransitionError):
        move_all(store, Status.WRITING, Status.COLLECTED)


def test_mask_hint_test_answers_as_the_eight_scans():
    """redaction._may_hold_mask (issue 30: one scan for `*`, one for `...`, the wide mask
    characters only in a text that is not ASCII) answers exactly as the eight substring scans it
    replaced, on random texts over the mask characters and prose."""
    import random

    from batchrun.base.redaction import _MASK_HINTS, _may_hold_mask

    rng = random.Random(30)
    alphabet = "*.•●·…ab \n"
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        assert _may_hold_mask(text) == any(h in text for h in _MASK_HINTS), text
