"""A controller's start-up pays for its own cloud only: every restart of `remediator run` (and
every end-to-end test's) imports the controller; google-cloud-compute alone was a third of that
on a loaded machine, for clusters that never call Compute Engine."""

from __future__ import annotations

import json
import subprocess
import sys

CLOUD_LIBRARIES = ("google.cloud.compute_v1", "boto3")


def test_the_controller_imports_no_cloud_library_until_a_provider_needs_it() -> None:
    probe = (
        "import json, sys\n"
        "import remediator.controller.app\n"
        f"print(json.dumps([m for m in {CLOUD_LIBRARIES!r} if m in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300
    )
    assert json.loads(out.stdout) == []
