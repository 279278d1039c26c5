"""VolumeBinding (``pkg/scheduler/framework/plugins/volumebinding``) and the storage helpers the other
volume plugins share.

Modules: :mod:`.plugin` (the plugin, ``volume_binding.go``), :mod:`.binder` (``binder.go`` and the
assume caches), :mod:`.scorer` (``scorer.go``), :mod:`.storage` (``component-helpers/storage``) and
:mod:`.csi_translation` (``csi-translation-lib``). The registry path is
``py_scheduler.plugins.volume_binding:VolumeBinding``.
"""

from py_scheduler.plugins.volume_binding.plugin import (
    NAME,
    STATE_KEY,
    VolumeBinding,
    VolumeBindingArgs,
    VolumeBindingState,
    pre_bind_plan,
)

__all__ = ["NAME", "STATE_KEY", "VolumeBinding", "VolumeBindingArgs", "VolumeBindingState", "pre_bind_plan"]
