"""The run path imports ``kubernetes_asyncio`` without its ~860 generated API and model modules
(:mod:`py_scheduler.app.client.lazy_k8s`; issue 21: time to ready), and every name still resolves to the
object an eager import gives.

Each check runs in a fresh interpreter: the test process has imported the library eagerly already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def _run(code: str, *args: str) -> Any:
    """Run ``code`` in a fresh interpreter with this checkout first; its last stdout line as JSON."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip(), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_RUN_PATH = """
import atexit, gc, json, sys

class Watch:  # records whether the collector is on when the run path's main module is imported
    gc_at_import = None
    def find_spec(self, name, path=None, target=None):
        if name == "py_scheduler.app.process.main":
            Watch.gc_at_import = gc.isenabled()
        return None

sys.meta_path.insert(0, Watch())

def report():
    mods = sorted(sys.modules)
    print(json.dumps({
        "k8s": [m for m in mods if m.startswith("kubernetes_asyncio")],
        "rich": [m for m in mods if m == "rich" or m.startswith("rich.")],
        "kopf": "kopf" in sys.modules,
        "main": "py_scheduler.app.process.main" in sys.modules,
        "gc_at_import": Watch.gc_at_import,
        "gc_after": gc.isenabled(),
        "frozen": gc.get_freeze_count(),
    }))

atexit.register(report)
sys.argv = ["py-scheduler", "run", "--kubeconfig", sys.argv[1]]
from py_scheduler.cli import main
main()
"""


def test_run_path_does_not_import_the_generated_client(tmp_path: Path) -> None:
    # `py-scheduler run` imports the whole run path (kopf, the API adapter, the kubeconfig loaders)
    # and stops at the missing kubeconfig, before any connection.
    got = _run(_RUN_PATH, str(tmp_path / "missing.kubeconfig"))
    assert got["main"] and got["kopf"]  # the run path was imported, kopf included
    k8s = got["k8s"]
    assert "kubernetes_asyncio.client.api_client" in k8s and "kubernetes_asyncio.config.kube_config" in k8s
    models = [m for m in k8s if m.startswith("kubernetes_asyncio.client.models.")]
    apis = [m for m in k8s if m.startswith("kubernetes_asyncio.client.api.")]
    # kopf's optional kubernetes_asyncio support imports exactly these two models; eagerly ~700
    assert models == ["kubernetes_asyncio.client.models.v1_object_meta",
                      "kubernetes_asyncio.client.models.v1_owner_reference"], models
    assert apis == [], apis  # eagerly ~140
    assert len(k8s) < 40, k8s
    assert got["rich"] == []  # typer's error formatting only; never on the run path
    # the cyclic collector is off for the imports and on again for the scheduler (pause_gc owns it
    # during the initial sync only when it finds it on)
    assert got["gc_at_import"] is False and got["gc_after"] is True
    assert got["frozen"] > 50_000  # the imports' objects, never scanned again


_APP_ONLY = """
import json, sys
import py_scheduler.app.process.main
print(json.dumps([m for m in ("typer", "rich", "click") if m in sys.modules]))
"""


def test_app_package_does_not_import_the_cli_libraries() -> None:
    assert _run(_APP_ONLY) == []


_NAMES = """
import importlib, json, sys, types
if sys.argv[1] == "lazy":
    import py_scheduler.app  # installs the deferred packages
    assert "__getattr__" in sys.modules["kubernetes_asyncio.client.models"].__dict__
import kubernetes_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client import api, models

def ident(v):
    if isinstance(v, types.ModuleType):
        return "module " + v.__name__
    if isinstance(v, type):
        return "class " + v.__module__ + "." + v.__qualname__
    return repr(v)

out = {}
for pkg in (kubernetes_asyncio, client, api, models):
    names = sorted(set(pkg.__all__) | {"__version__"} if hasattr(pkg, "__version__") else set(pkg.__all__))
    out[pkg.__name__] = {n: ident(getattr(pkg, n)) for n in names}
# the generated client's deserializer looks model classes up by name in the models package
async def deserialize():
    async with client.ApiClient() as a:
        return a._ApiClient__deserialize({"metadata": {"name": "p", "labels": {"a": "b"}}}, "V1Pod")
import asyncio
pod = asyncio.run(deserialize())
out["pod"] = [type(pod).__name__, pod.metadata.name, pod.metadata.labels]
import kopf._cogs.helpers.thirdparty as tp
out["kopf"] = [tp.V1ObjectMetaAsync is client.V1ObjectMeta, tp.V1OwnerReferenceAsync is client.V1OwnerReference]
print(json.dumps(out))
"""


def test_every_name_resolves_as_the_eager_import_does() -> None:
    lazy = _run(_NAMES, "lazy")
    eager = _run(_NAMES, "eager")
    for pkg in ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.api",
                "kubernetes_asyncio.client.models"):
        assert len(eager[pkg]) > 5
        assert lazy[pkg] == eager[pkg], pkg
    assert len(eager["kubernetes_asyncio.client.models"]) > 500
    assert lazy["pod"] == eager["pod"] == ["V1Pod", "p", {"a": "b"}]
    assert lazy["kopf"] == eager["kopf"] == [True, True]


_STAR = """
import json, sys
from py_scheduler.app.client import lazy_k8s
assert not lazy_k8s.install()  # done by importing the package; once
import kubernetes_asyncio.client.models as m
before = sum(1 for k in sys.modules if k.startswith("kubernetes_asyncio.client.models."))
ns = {}
exec("from kubernetes_asyncio.client.models import *", ns)
print(json.dumps({"before": before, "star": len([k for k in ns if not k.startswith("__")]), "all": len(m.__all__),
                  "v1pod": ns["V1Pod"].__module__, "dir": "V1Pod" in dir(m)}))
"""


def test_star_import_and_unknown_names_run_the_real_init() -> None:
    got = _run(_STAR)
    assert got["before"] == 0  # nothing imported until asked
    assert got["star"] == got["all"] > 500  # `import *` asked for __all__: the real __init__ ran
    assert got["v1pod"] == "kubernetes_asyncio.client.models.v1_pod"
    assert got["dir"]


_ALREADY = """
import json, sys
import kubernetes_asyncio
from py_scheduler.app.client import lazy_k8s
models = sum(1 for k in sys.modules if k.startswith("kubernetes_asyncio.client.models."))
shell = "__getattr__" in sys.modules["kubernetes_asyncio.client"].__dict__
print(json.dumps([lazy_k8s.install(), shell, models > 500]))
"""


def test_install_is_a_no_op_after_an_eager_import() -> None:
    # tests and tools that imported the library first keep the eager modules
    assert _run(_ALREADY) == [False, False, True]


_THREADS = """
import json, sys, threading
import py_scheduler.app  # installs the deferred packages
from kubernetes_asyncio import client
names = ["V1Pod", "V1Node", "V1Lease", "CoreV1Api", "ApiClient", "Configuration", "V1Binding", "CoreV1Event"] * 4
got = {}
barrier = threading.Barrier(len(names))
def resolve(i, name):
    barrier.wait()
    got[i] = getattr(client, name).__module__
threads = [threading.Thread(target=resolve, args=(i, n)) for i, n in enumerate(names)]
for t in threads: t.start()
for t in threads: t.join(60)
print(json.dumps({"alive": sum(t.is_alive() for t in threads), "modules": sorted(set(got.values())),
                  "resolved": len(got),
                  "models": sum(1 for m in sys.modules if m.startswith("kubernetes_asyncio.client.models."))}))
"""


def test_concurrent_lookups_resolve_without_deadlock() -> None:
    got = _run(_THREADS)
    assert got["alive"] == 0 and got["resolved"] == 32
    assert got["models"] == 5  # each name from its own module, no fallback to the whole package
    assert got["modules"] == sorted({
        "kubernetes_asyncio.client.models.v1_pod", "kubernetes_asyncio.client.models.v1_node",
        "kubernetes_asyncio.client.models.v1_lease", "kubernetes_asyncio.client.api.core_v1_api",
        "kubernetes_asyncio.client.api_client", "kubernetes_asyncio.client.configuration",
        "kubernetes_asyncio.client.models.v1_binding", "kubernetes_asyncio.client.models.core_v1_event"})
