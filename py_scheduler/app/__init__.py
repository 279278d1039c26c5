"""The live process (``py-scheduler run``): API adapter, informers, queue loop, leader election, serving.

Importing this package defers ``kubernetes_asyncio``'s generated API and model modules
(:mod:`py_scheduler.app.lazy_k8s`): kopf and the API adapter import that library, and its eager
``__init__`` cost ~0.4 s of every start.
"""

from py_scheduler.app import lazy_k8s

lazy_k8s.install()
