"""The in-tree plugin registry fails loudly: a registered plugin that cannot be imported is an error
naming it, never a plugin silently left out of the profile (issue 14)."""

from __future__ import annotations

import pytest

from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.errors import PluginImportError
from py_scheduler.framework.handle import PluginFactory
from py_scheduler.plugins import registry


def test_every_registered_plugin_imports() -> None:
    assert registry.available() == list(registry._ENTRIES)


@pytest.mark.parametrize("entry", ["py_scheduler.plugins.no_such_module:Nope", "py_scheduler.plugins.node_name:Nope"])
def test_unimportable_plugin_raises_naming_it(monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    monkeypatch.setitem(registry._ENTRIES, "Broken", entry)
    registry.get.cache_clear()
    try:
        with pytest.raises(PluginImportError, match=r"plugin 'Broken' \(" + entry.replace(".", r"\.") + r"\)"):
            registry.get("Broken")
        with pytest.raises(PluginImportError, match="Broken"):
            registry.available()
        with pytest.raises(PluginImportError, match="Broken"):
            build_framework(ProfileConfig(), registry=registry)
    finally:
        registry.get.cache_clear()


def test_unknown_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        registry.get("NoSuchPlugin")


def test_module_is_a_plugin_registry() -> None:
    factory: PluginFactory = registry.get("NodeName")
    assert factory.__name__ == "create"
