"""Suite-wide hooks: in CI (``CI=true``, as .ci/run and hosted CI set it) a skipped test is a failure.

A test skips when something it needs is missing (a tool: Chromium, kubectl; a proxyable address);
on a developer's machine that is a skip, but in CI it would silently drop a check, so there the
skip is reported as a failure naming the reason: the CI scripts must install what tests need
(.ci/install-tools, .ci/image-build). Module-level skips (``pytest.skip(allow_module_level=True)``,
``importorskip``) fail the collection the same way. Expected failures (``xfail``) are not skips.
Data a test needs counts as a tool: the golden vectors (``../shared/golden``) must be beside the
checkout in CI, as .ci/run's clean-clone runs have them.

Every py-scheduler the tests start checks that no delivered API object is changed in place
(``PY_SCHEDULER_DEBUG_IMMUTABLE_OBJECTS=1``, unless the caller set it; framework/memo.py's
DeliveryGuard); ``tests/e2e/scheduler_proc.py`` fails a test whose scheduler log reports one.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from py_scheduler.framework.memo import DEBUG_ENV

os.environ.setdefault(DEBUG_ENV, "1")


def in_ci() -> bool:
    """``CI`` is ``true`` (any case) or ``1``: the variable hosted CI services and .ci/run set."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def _skip_reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = _skip_reason(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"skipped in CI (CI=true), which counts as a failure: {reason}\n"
                       "A test that needs a tool must not skip in CI: install the tool in the CI scripts "
                       "(.ci/install-tools).")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        _as_failure(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped and in_ci():
        _as_failure(report)
