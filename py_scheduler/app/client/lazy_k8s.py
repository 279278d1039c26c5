"""Import ``kubernetes_asyncio`` without importing every generated API and model module.

Why: any import of a ``kubernetes_asyncio`` module first runs its package ``__init__``, which imports
``kubernetes_asyncio.client``, whose ``__init__`` imports all ~140 generated API classes and ~700
model classes (``client/models/__init__``; ``client/api_client.py`` imports that package too). The
live process uses none of them: :mod:`py_scheduler.app.client.kube` sends raw JSON on the REST
client's session (:func:`py_scheduler.app.client.internals.call_api`),
:mod:`py_scheduler.app.client.credentials` builds a ``Configuration`` through the kubeconfig loaders,
and kopf (``kopf._cogs.helpers.thirdparty``) imports two models (``V1ObjectMeta``,
``V1OwnerReference``) for its optional ``kubernetes_asyncio`` support. Importing the ~860 modules
cost ~0.35-0.45 s CPU of every start, a third of importing the run path (issue 21: time to ready).

How: :func:`install` puts the four package modules (``kubernetes_asyncio``, ``.client``,
``.client.api``, ``.client.models``) into ``sys.modules`` created from their real specs (same
``__path__``, ``__file__``, ``__spec__``) but without running their ``__init__``; each gets a
module ``__getattr__`` (PEP 562) that resolves a name the way that ``__init__`` would have bound it:

- ``from kubernetes_asyncio.X import Name`` / ``import kubernetes_asyncio.X as Name`` lines of the
  real ``__init__`` (read as text once per package, at the first lookup) map ``Name`` to its module,
  which is imported then (one model module instead of all of them); string constants
  (``__version__ = "..."``) are read from the same text;
- a submodule's name (``from kubernetes_asyncio.client import rest``) imports that submodule, as
  the import system does for a name the package lacks;
- any other name (``__all__``, ``import *``, a name not in the file) runs the real ``__init__`` in
  the module's namespace, exactly the import that was deferred; after that, lookups are plain.

So every name resolves to the very object the eager import gives (a unit test compares all of them
against an eager import in another process); only the time of import changes. Submodule imports
(``kubernetes_asyncio.client.api_client``) work as usual: the packages' ``__path__`` is the real one.

Depends on: ``kubernetes_asyncio``'s package ``__init__`` files consisting of such import lines and
string constants (true of 36.1.0, the installed version; a release that adds other statements is
still honoured, through the run-the-real-``__init__`` fallback, and the unit test's comparison of
every name with an eager import would show a name that resolves differently). Installed only when no
``kubernetes_asyncio`` module is imported yet (otherwise there is nothing left to save); never
uninstalled.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from py_scheduler.app.client.internals import LAZY_PACKAGES

PACKAGES = LAZY_PACKAGES
"""The packages whose ``__init__`` is deferred, parents first (a third-party internal: :mod:`.internals`)."""

_FROM = re.compile(r"^from\s+(kubernetes_asyncio(?:\.\w+)+)\s+import\s+(\w+)\s*$", re.MULTILINE)
_IMPORT_AS = re.compile(r"^import\s+(kubernetes_asyncio(?:\.\w+)+)\s+as\s+(\w+)\s*$", re.MULTILINE)
_CONSTANT = re.compile(r"^(\w+)\s*=\s*\"([^\"\\]*)\"\s*$", re.MULTILINE)

_lock = threading.RLock()


class _Package:
    """The deferred ``__init__`` of one package module: the name map and the fallback."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.names: dict[str, tuple[str, str | None]] | None = None
        """``name -> (module, attribute)``; attribute None: the module itself (``import ... as``)."""
        self.constants: dict[str, str] = {}
        self.executed = False

    def _source(self) -> str:
        origin = self.module.__spec__.origin if self.module.__spec__ is not None else None
        if not origin:
            raise ImportError(f"no source for {self.module.__name__}")
        return Path(origin).read_text(encoding="utf-8")

    def _load_names(self) -> dict[str, tuple[str, str | None]]:
        if self.names is None:
            names: dict[str, tuple[str, str | None]] = {}
            text = self._source()
            for m in _FROM.finditer(text):
                names[m.group(2)] = (m.group(1), m.group(2))
            for m in _IMPORT_AS.finditer(text):
                names[m.group(2)] = (m.group(1), None)
            self.constants = {m.group(1): m.group(2) for m in _CONSTANT.finditer(text)}
            self.names = names
        return self.names

    def _execute(self) -> None:
        """Run the real ``__init__`` in the module's namespace (what the eager import does)."""
        if self.executed:
            return
        self.executed = True
        source = self._source()
        origin = self.module.__spec__.origin if self.module.__spec__ is not None else "<unknown>"
        exec(compile(source, str(origin), "exec"), self.module.__dict__)

    def getattr(self, name: str) -> Any:
        # The lock guards only reading the map and running the real __init__: a name or a submodule
        # is imported without it (the import system has its own per-module locks), so a thread
        # importing a kubernetes_asyncio module never waits on a thread that waits on that module.
        if not self.executed:
            with _lock:
                names = self._load_names()
            if name in names:
                target, attr = names[name]
                value: Any = importlib.import_module(target)
                if attr is not None:
                    value = getattr(value, attr)
                setattr(self.module, name, value)
                return value
            if name in self.constants:
                setattr(self.module, name, self.constants[name])
                return self.constants[name]
            if not name.startswith("__") and importlib.machinery.PathFinder.find_spec(
                    f"{self.module.__name__}.{name}", list(self.module.__path__)) is not None:
                # a submodule (``from kubernetes_asyncio.client import rest``): import it, as the
                # import system does when the attribute is missing
                return importlib.import_module(f"{self.module.__name__}.{name}")
            with _lock:
                self._execute()
        try:
            return self.module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.module.__name__!r} has no attribute {name!r}") from None

    def dir(self) -> list[str]:
        with _lock:
            if self.executed:
                return sorted(self.module.__dict__)
            return sorted({*self.module.__dict__, *self._load_names(), *self.constants})


def install() -> bool:
    """Put the deferred package modules of :data:`PACKAGES` into ``sys.modules``.

    Returns:
        True when installed; False when any ``kubernetes_asyncio`` module was already imported or
        the library is not installed (nothing done).
    """
    with _lock:
        if any(name == "kubernetes_asyncio" or name.startswith("kubernetes_asyncio.") for name in sys.modules):
            return False
        if importlib.util.find_spec("kubernetes_asyncio") is None:
            return False
        for name in PACKAGES:
            # A dotted name's spec is found through its parent's __path__: the parent is the shell
            # installed just before, so no __init__ runs here.
            spec = importlib.util.find_spec(name)
            if spec is None or spec.submodule_search_locations is None:
                raise ImportError(f"{name} is not a package; cannot defer its __init__")
            module = importlib.util.module_from_spec(spec)
            package = _Package(module)
            module.__dict__["__getattr__"] = package.getattr  # PEP 562: looked up in the module's dict
            module.__dict__["__dir__"] = package.dir
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
        return True
