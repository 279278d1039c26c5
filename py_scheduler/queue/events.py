"""Moved to :mod:`py_scheduler.framework.events` (issue 14: cluster events are part of the plugin
contract, which lives in the framework layer). This alias keeps ``py_scheduler.queue.events`` importable
for code written before the move; new code imports the framework module."""

import sys

from py_scheduler.framework import events as _events

sys.modules[__name__] = _events
