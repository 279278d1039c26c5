"""Command line tools the tests run (helm, promtool), built from their Go modules into the test bed's cache.

Each tool has a Go module of its own next to this file (``helm/go.mod``, ``promtool/go.mod``: a
``tool`` directive and the pinned version), so bumping one never changes the cache key of the
Kubernetes binaries (``go.mod`` here) nor of the others. Like :func:`bed.build_toxiproxy`: the
version is what ``go list -m`` reads from the module, the binary goes to
``CACHE_ROOT/<name>-<version>_<go>/<name>`` (``~/.cache/py-scheduler/testbed`` unless
``TESTBED_CACHE_DIR``), built on first use by a test's fixture (so CI needs no extra step), nothing
at all when cached; concurrent callers serialise on ``CACHE_ROOT/.<name>.lock``, and a build goes to
a ``.partial`` directory renamed into place when complete. ``versions.json`` beside the binary
records the version, the toolchain and the cold build's seconds.

    python3 tests/e2e/testbed/gotools.py helm promtool     # build (or find) them, print their paths

Cold builds measured here (2 cores, module cache filled, the machine shared with the Kubernetes build
and other Go builds, load 15-30): helm v4.3.2 29m37s wall (7m41s user), promtool v0.316.0 (Prometheus
3.16.0, ~1,360 packages) 32m56s wall (12m22s user); nothing when cached. tests/e2e/conftest.py builds
those a selected test module names in ``GO_TOOLS`` before the tests run, outside their timeout.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bed  # the test bed's module, beside this file


@dataclass(frozen=True)
class GoTool:
    """One binary built from a Go module of its own.

    Attributes:
        name: the binary's name (and the cache directory's prefix).
        module_dir: the Go module that pins it (a ``tool`` directive).
        module: the upstream module whose version names the cache directory.
        package: the main package to build.
        version_ldflags: ``-X`` flags with ``{version}`` for the pinned version (what the upstream
            release build stamps, so ``NAME version`` tells the truth).
    """

    name: str
    module_dir: Path
    module: str
    package: str
    version_ldflags: tuple[str, ...] = ()

    def version(self) -> str:
        """The version ``module_dir/go.mod`` pins (``go list -m``)."""
        return bed._run_go(["list", "-m", "-f", "{{.Version}}", self.module], cwd=self.module_dir)

    def binary(self) -> Path:
        """Where the binary is (or will be) for the pinned version and the current Go toolchain."""
        go = bed._run_go(["env", "GOVERSION"], cwd=self.module_dir)
        return bed.CACHE_ROOT / f"{self.name}-{self.version()}_{go}" / self.name


HELM = GoTool(
    name="helm", module_dir=bed.MODULE_DIR / "helm", module="helm.sh/helm/v4", package="helm.sh/helm/v4/cmd/helm",
    # helm's Makefile: internal/version.version and an empty metadata for a release build
    version_ldflags=("-X helm.sh/helm/v4/internal/version.version={version}",
                     "-X helm.sh/helm/v4/internal/version.metadata=",
                     "-X helm.sh/helm/v4/internal/version.gitTreeState=clean"))
"""helm v4 (``helm/go.mod``): the chart tests (``helm template``, ``lint``, ``install``)."""

PROMTOOL = GoTool(
    name="promtool", module_dir=bed.MODULE_DIR / "promtool", module="github.com/prometheus/prometheus",
    package="github.com/prometheus/prometheus/cmd/promtool",
    # Prometheus tags module versions v0.X.Y for release v3.X.Y (Makefile.common's promu stamps
    # common/version.Version the same way)
    version_ldflags=("-X github.com/prometheus/common/version.Version={release}",))
"""promtool (``promtool/go.mod``): ``promtool check rules`` / ``test rules`` on deploy/monitoring/."""


def _release(tool: GoTool, version: str) -> str:
    """The release a module version stands for: Prometheus' module ``v0.3MM.P`` is release ``3.MM.P``."""
    parts = version.lstrip("v").split(".")
    if tool is PROMTOOL and len(parts) == 3 and parts[0] == "0" and parts[1].isdigit() and int(parts[1]) >= 300:
        return f"{int(parts[1]) // 100}.{int(parts[1]) % 100}.{parts[2]}"
    return version.lstrip("v")


def build(tool: GoTool, progress: bed.ProgressFn = bed._say) -> Path:
    """Build ``tool`` unless the cache has it; returns the binary's path.

    Raises:
        bed.TestbedError: ``go`` missing, the module not fetchable, or the build failing.
    """
    version = tool.version()
    binary = tool.binary()
    dest = binary.parent
    if os.access(binary, os.X_OK):
        return binary
    bed.CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(bed.CACHE_ROOT / f".{tool.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(binary, os.X_OK):  # someone else built it while we waited
            return binary
        staging = dest.with_name(f".{dest.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        progress(f"building {tool.name} {version} into {dest}")
        start = time.monotonic()
        ldflags = " ".join(f.format(version=version, release=_release(tool, version)) for f in tool.version_ldflags)
        bed._run_go(["build", "-trimpath", "-ldflags", ldflags, "-o", str(staging / tool.name), tool.package],
                    cwd=tool.module_dir)
        (staging / "versions.json").write_text(json.dumps(
            {tool.name: version, "go": dest.name.rsplit("_", 1)[-1],
             "build_seconds": round(time.monotonic() - start),
             "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
        progress(f"built {tool.name} in {bed._fmt_secs(time.monotonic() - start)}: {binary}")
        return binary


TOOLS = {t.name: t for t in (HELM, PROMTOOL)}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(TOOLS):
        print(build(TOOLS[name]))
