"""bench/bench_lib/soak_caps.py: the soak's launcher lowers every memory bound through names that must
still exist in py_scheduler, reports each structure's size against its cap, and hands the command
line to py-scheduler (issue 31, item 6). The lowering runs in a subprocess: it changes module state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.bench_lib.soak_caps import LOWERED, Reporter

REPO = Path(__file__).resolve().parents[3]


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_every_bound_it_lowers_exists_and_takes_the_lowered_cap() -> None:
    """Fails loudly when py_scheduler renames a bound the soak relies on (AttributeError in apply)."""
    got = json.loads(_python("""
import json
from bench.bench_lib import soak_caps as s
s.apply()
from py_scheduler.plugins.dynamic_resources.selector_memo import SelectorMemo
print(json.dumps({
    "tombstones per kind": s.reflector.ObjectStore().tombstone_max,
    "queue hint memos": s.scheduling_queue._MEMO_MAX,
    "event series": s.binder.EVENT_SERIES_MAX,
    "review caches": s.secure.CACHE_SIZE,
    "GPU node states": s.accounting.MEMO_CAPACITY,
    "GPU request tokens": s.gpu_filter._TOKENS_MAX,
    "DRA selector results": [SelectorMemo().max_size, s.selector_memo.SELECTOR_MEMO.max_size],
    "DRA per-node views": [s.pools.SLICE_VIEW_NODES_MAX, s.allocator.SLICE_VIEW_NODES_MAX],
    "preemption dry-run victims": s.VictimsMemo().max_entries,
    "PodInfo request parses": s.memo.REQUESTS.size,
    "queueing-hint PodInfos": s.memo.HINT_POD_INFOS.size,
    "PV node affinities": s.memo.PV_NODE_AFFINITY.size,
    "CEL selectors": s.memo.CEL_SELECTORS.size,
    "DRA quantities": s.memo.QUANTITIES.size,
}))
"""))
    assert set(got) == set(LOWERED)
    for name, cap in LOWERED.items():
        values = got[name] if isinstance(got[name], list) else [got[name]]
        assert values == [cap] * len(values), (name, values)


def test_sizes_follow_structures_created_after_tracking_and_stay_within_the_caps() -> None:
    """A reflector store driven past its lowered tombstone cap, and a preemption memo, are found
    through their constructors (the heap may be frozen, so not by the collector) and reported at
    their caps; a structure nobody created reports 0."""
    got = json.loads(_python("""
import json
from bench.bench_lib import soak_caps as s
s.apply(); s.track()
store = s.reflector.ObjectStore(now=lambda: 0.0)
class Kind:
    kind = "Pod"
    @staticmethod
    def key(obj): return obj["metadata"]["name"]
for i in range(3000):
    store.apply(Kind, "DELETED", {"metadata": {"name": f"p{i}", "namespace": "d", "uid": f"u{i}",
                                               "resourceVersion": str(i + 1)}})
victims = s.VictimsMemo()
print(json.dumps(s.sizes()))
"""))
    assert set(got) == set(LOWERED)
    assert got["tombstones per kind"] == {"size": LOWERED["tombstones per kind"], "cap": LOWERED["tombstones per kind"]}
    assert got["preemption dry-run victims"]["size"] == 0
    assert got["event series"] == {"size": 0, "cap": LOWERED["event series"]}


def test_reporter_keeps_peaks_and_counts_resets(tmp_path: Path) -> None:
    """A structure cleared at its cap shows as a reset with its peak kept; the file is whole JSON."""
    readings = iter([{"m": {"size": 3, "cap": 4}}, {"m": {"size": 4, "cap": 4}}, {"m": {"size": 1, "cap": 4}}])
    out = tmp_path / "bounds.json"
    rep = Reporter(str(out), 30.0, measure=lambda: next(readings))
    rep.once()
    rep.once()
    doc = rep.once()
    assert doc["bounds"]["m"] == {"size": 1, "cap": 4, "peak": 4, "resets": 1}
    assert json.loads(out.read_text())["bounds"]["m"]["peak"] == 4


def test_the_launcher_hands_the_command_line_to_py_scheduler(tmp_path: Path) -> None:
    """``python -m bench.bench_lib.soak_caps --report F -- run --help`` is py-scheduler's own ``run --help``."""
    out = subprocess.run([sys.executable, "-m", "bench.bench_lib.soak_caps", "--report", str(tmp_path / "b.json"),
                          "--", "run", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--decisions-capacity" in out.stdout
