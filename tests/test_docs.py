"""The reference documents match the code: the configuration reference is what its
generator writes from the settings classes now, and every relative link resolves."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT


def test_the_configuration_reference_is_what_the_settings_classes_say() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "gen_config_reference.py")],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    written = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert done.stdout == written, (
        "docs/configuration.md is out of date: "
        "python docs/gen_config_reference.py > docs/configuration.md"
    )


def test_every_relative_link_in_the_documents_resolves() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "check_links.py")],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
