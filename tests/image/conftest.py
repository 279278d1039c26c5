"""tests/image: the built container image, run as deploy/'s Deployment runs it (issue 18).

These tests need the image (``.ci/image-build``), podman + runc, root and the e2e test bed, and take
about a minute, so the default ``pytest tests`` run does not collect them: ``make image-test``
builds the image and then runs ``pytest tests/image`` with ``PY_SCHEDULER_IMAGE_TEST=1``.
"""

from __future__ import annotations

import os

collect_ignore_glob = [] if os.environ.get("PY_SCHEDULER_IMAGE_TEST") == "1" else ["test_*.py"]
