"""Errors shared by the framework, the plugins and the configuration loader; :class:`PodParseError`
for a Pod field the scheduler cannot interpret.

:class:`ConfigError` is raised by a plugin factory (``create(args, handle)``) on bad ``pluginConfig``
args and by :mod:`py_scheduler.framework.config` on a bad KubeSchedulerConfiguration; it lives here,
in the bottom layer, so plugins need not import the configuration loader (which is handed the plugin
registry and so sits beside the plugins, not under them). Upstream: the ``error`` returned by a
``PluginFactory`` (``pkg/scheduler/framework/runtime/registry.go``) and ``field.ErrorList``.
"""

from __future__ import annotations

import reprlib

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 120
_SHORT.maxlevel = 3
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8


def short_repr(value: object) -> str:
    """``repr(value)`` bounded in length and time (strings and other reprs cut at 120 characters,
    containers at 8 items and 3 levels): what messages quote of a value from the API or a file, so
    a 5 MB string or a structure built from YAML aliases yields a line, not megabytes. Equal to
    ``repr`` for the short scalars and small maps of ordinary input."""
    return _SHORT.repr(value)


_VISIBLE = {c: f"\\x{c:02x}" for c in (*range(9), *range(11, 32), *range(127, 160))}


def printable(text: str) -> str:
    """``text`` with C0/C1 control characters but tab and newline written as ``\\xNN``: what a terminal
    gets of a name or message from a file (a Pod named ``"\\x1b]0;pwned\\x07"`` retitles it)."""
    return text.translate(_VISIBLE)


class ConfigError(ValueError):
    """A configuration that must stop start-up; the message names the field and value.

    ``errors`` lists every problem found (``<field path>: <message>``) when several were collected
    (:func:`py_scheduler.framework.config.parse_config`); otherwise it is ``[message]``.
    """

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors: list[str] = list(errors) if errors is not None else [message]


class PluginImportError(ImportError):
    """A plugin registered in the in-tree registry whose module or class cannot be imported: a
    broken build, reported with the plugin's name and the cause instead of the plugin silently
    vanishing from the profile."""


class SchedulingError(RuntimeError):
    """A plugin returned Error (not a rejection) in a scheduling cycle: the Pod goes to backoff and
    the message is logged (upstream: a non-nil ``error`` from ``schedulePod``)."""


class PodParseError(ValueError):
    """A Pod field the scheduler cannot interpret (e.g. a malformed quantity or annotation).

    ``field`` names the offending field (``spec.containers[0].resources.requests.cpu``), ``value``
    the raw value; ``str()`` is the message shown in the FailedScheduling event.
    """

    def __init__(self, field: str, value: object, why: str = "") -> None:
        self.field = field
        self.value = value
        msg = f"invalid value {short_repr(value)} for {field}"
        if why:
            msg += f": {why}"
        super().__init__(msg)
