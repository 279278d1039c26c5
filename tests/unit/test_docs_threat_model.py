"""docs (issue 31, item 7): docs/operations.md states the port's threat model and names every flag that
changes it; docs/decisions.md and README.md show HTTPS with a token file, not stale plain-HTTP examples."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_operations_has_the_threat_model_with_every_serving_flag() -> None:
    ops = (REPO / "docs" / "operations.md").read_text()
    assert "### Threat model of the port" in ops
    model = ops.split("### Threat model of the port", 1)[1].split("\n## ", 1)[0]
    for heading in ("**Who can reach it.**", "**What anyone who can connect can do.**", "**What each flag changes.**",
                    "namespace user"):
        assert heading in model, heading
    for flag in ("--anonymous-auth=false", "--authentication-audiences", "--authorization-always-allow-paths",
                 "--profiling", "--tls-min-version", "--plain-http"):
        assert f"`{flag}" in model, flag


def test_decision_examples_use_https_and_a_token_file() -> None:
    for doc in ("docs/decisions.md", "README.md"):
        text = (REPO / doc).read_text()
        assert not re.search(r"--decisions-url http://", text), doc  # the default serving is HTTPS
        assert not re.search(r"curl -s 'localhost:10259", text), doc
        assert '--token "$(' not in text, doc  # a token on a command line is visible to every user
        assert "--token-file" in text, doc
