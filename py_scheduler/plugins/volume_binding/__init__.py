"""VolumeBinding (``pkg/scheduler/framework/plugins/volumebinding``).

Modules: :mod:`.plugin` (the plugin, ``volume_binding.go``), :mod:`.binder` and :mod:`.bind` (``binder.go``:
find / assume, and PreBind), :mod:`.assume_cache` and :mod:`.scorer` (``scorer.go``); the storage helpers it
shares with the other volume plugins live in ``plugins/helpers/`` (``storage``, ``csi_translation``).
The registry path is ``py_scheduler.plugins.volume_binding:VolumeBinding``.
"""

from py_scheduler.plugins.volume_binding.plugin import (
    NAME,
    STATE_KEY,
    VolumeBinding,
    VolumeBindingArgs,
    VolumeBindingState,
)

__all__ = ["NAME", "STATE_KEY", "VolumeBinding", "VolumeBindingArgs", "VolumeBindingState"]
