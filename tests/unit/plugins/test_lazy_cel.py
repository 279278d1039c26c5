"""The CEL environment (celpy, lark, :mod:`py_scheduler.plugins.helpers.cel`) is not loaded by the
run path's imports nor by building the default profile, and is loaded on the first DRA selector
evaluation (issue 21: start-up CPU; the environment costs ~0.2-0.3 s to import and build).

Each check runs in a fresh interpreter: in the test process other tests have imported it already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CEL_MODULES = ("celpy", "lark", "py_scheduler.plugins.helpers.cel")

_PROBE = """
import json, sys
import py_scheduler.cli
from py_scheduler.app.process import main
from py_scheduler.framework.config import SchedulerConfig
profiles = main.build_profiles(SchedulerConfig())
before = [m for m in {mods!r} if m in sys.modules]

from py_scheduler.plugins.dynamic_resources.allocator import Allocator
G = "gpu.example.com"
EXPR = "device.attributes['gpu.example.com'].model == 'a100'"
dclass = {{"metadata": {{"name": "gpu"}}, "spec": {{"selectors": [{{"cel": {{"expression": EXPR}}}}]}}}}
sl = {{"metadata": {{"name": "s"}}, "spec": {{"driver": G, "nodeName": "n1",
      "pool": {{"name": "p", "generation": 1, "resourceSliceCount": 1}},
      "devices": [{{"name": "d0", "attributes": {{"model": {{"string": "a100"}}}}}},
                  {{"name": "d1", "attributes": {{"model": {{"string": "h100"}}}}}}]}}}}
claim = {{"metadata": {{"name": "c", "namespace": "default", "uid": "u"}},
          "spec": {{"devices": {{"requests": [{{"name": "r", "exactly": {{"deviceClassName": "gpu",
                   "allocationMode": "ExactCount", "count": 1}}}}]}}}}}}
result = Allocator(set(), {{"gpu": dclass}}, [sl]).allocate({{"metadata": {{"name": "n1"}}}}, [claim])
after = [m for m in {mods!r} if m in sys.modules]
plugins = sorted({{pl.name for fw in profiles.values() for pl in fw.filter_plugins}})
print(json.dumps({{"plugins": plugins, "before": before, "after": after,
                  "devices": [r["device"] for r in result[0]["devices"]["results"]]}}))
"""


def test_cel_environment_is_loaded_on_first_selector_use_only() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(mods=CEL_MODULES)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "DynamicResources" in got["plugins"]  # the plugin was built without loading CEL
    assert got["before"] == []
    assert got["after"] == list(CEL_MODULES)
    assert got["devices"] == ["d0"]  # the selector was evaluated (d1 is an h100)
