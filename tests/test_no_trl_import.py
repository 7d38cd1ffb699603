"""TRL is a benchmark-only dependency (the `bench` extra): importing the library must
never pull it in."""

import subprocess
import sys


def test_library_does_not_import_trl():
    code = (
        "import sys, rlvr, rlvr.cli, rlvr.train, rlvr.rollout, rlvr.models, rlvr.algo, "
        "rlvr.eval, rlvr.compare; print('trl' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
