"""Helpers shared by several plugins (tolerations, node / label selectors, score normalization).

Upstream counterparts: ``pkg/scheduler/framework/plugins/helper/``,
``staging/src/k8s.io/component-helpers/scheduling/corev1/`` and ``k8s.io/apimachinery/pkg/labels``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from py_scheduler.framework.handle import Handle

__all__ = ["NoArgs", "check_no_args"]

_META_KEYS = frozenset({"apiVersion", "kind"})


def check_no_args(plugin: str, args: dict[str, Any] | None) -> None:
    """For plugins without an args type (upstream registers none): accept only ``apiVersion`` /
    ``kind`` in ``pluginConfig.args``.

    Raises:
        ConfigError: any other key (the message names the plugin and the keys).
    """
    from py_scheduler.framework.errors import ConfigError

    extra = sorted(set(args or {}) - _META_KEYS)
    if extra:
        raise ConfigError(f"{plugin} takes no args, got unknown field(s) {extra}")


class NoArgs:
    """Base of the plugins without an args type that take nothing from the Handle: ``create`` accepts
    only ``apiVersion`` / ``kind`` (:func:`check_no_args`) and calls the class without arguments.

    Raises (``create``):
        ConfigError: args other than ``apiVersion`` / ``kind``.
    """

    name: str

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> Self:
        check_no_args(cls.name, args)
        return cls()
