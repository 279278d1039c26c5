"""The live process (``py-scheduler run``), by job: ``client``, ``scheduling``, ``serving``, ``process``,
``telemetry``, ``tuning`` (docs/architecture.md has the map).

Importing this package defers ``kubernetes_asyncio``'s generated API and model modules
(:mod:`py_scheduler.app.client.lazy_k8s`): kopf and the API adapter import that library, and its eager
``__init__`` cost ~0.4 s of every start.
"""

from py_scheduler.app.client import lazy_k8s

lazy_k8s.install()
