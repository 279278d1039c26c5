"""The bed's state file under processes started from several threads at once.

test_dra_real restarts both nodes' DRA drivers through ``asyncio.to_thread``; both threads wrote one
``state.tmp`` and renamed it, and the second rename failed (FileNotFoundError, a CI failure). Each
process a thread starts must be recorded, and the file must stay valid JSON."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import bed  # tests/e2e/helpers puts tests/e2e/testbed on sys.path

from tests.e2e.helpers import Testbed


def test_processes_started_from_many_threads_are_all_recorded(tmp_path: Path) -> None:
    tb: Testbed = bed.Testbed(tmp_path / "bed")
    tb.dir.mkdir()
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def start(i: int) -> None:
        try:
            go.wait(10)
            for j in range(10):
                tb._spawn(f"p{i}-{j}", ["true"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    recorded = json.loads(tb.state_file.read_text())["processes"]
    assert sorted(recorded) == sorted(f"p{i}-{j}" for i in range(4) for j in range(10))
    for name in recorded:
        tb.stop(name)
