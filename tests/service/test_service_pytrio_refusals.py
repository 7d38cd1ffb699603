"""`python -m rlvr.service.as_pytrio run` runs a PyTRIO SDK script against a server on a
free port; what the local service cannot do (an unknown model alias, the `dro` loss,
`auto_shift`, image chunks) reaches the script as the SDK's own error, in one line, and
the server goes on serving the same script. The run writes only its named profile: the
SDK's default profile and `env.toml` are never created (HOME is fresh).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hf_testlib import build_tiny_hf_model

REPO = Path(__file__).parents[2]
PROBE = REPO / "tests" / "lab" / "sdk_refusals.py"


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    pytest.importorskip("pytrio", reason="needs pytrio 0.2.8 (pip install -e '.[test]')")
    work = tmp_path_factory.mktemp("refusals")
    model = build_tiny_hf_model(work / "tiny")
    home = work / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTRIO_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "rlvr.service.as_pytrio", "run", "--root", str(work / "root")]
    command += ["--model", f"tiny={model}", "--", str(PROBE), "tiny"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=work)
    return done, home, work


def test_the_script_ran_to_the_end(ran):
    done, _, _ = ran
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^SERVING loss_sum=\S+ token_count=3(\.0)?$", done.stdout, re.M), done.stdout


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("alias", r"model 'nope/model' is not served here; served: tiny"),
        (
            "dro",
            r"loss_fn='dro' is computed on the remote service and its formula is not published",
        ),
        ("auto_shift", r"auto_shift=True cannot take effect locally"),
        ("image", r"image chunks need a vision-language model"),
    ],
)
def test_a_refusal_reaches_the_script_as_the_sdks_error(ran, what, message):
    done, _, _ = ran
    line = next((x for x in done.stdout.splitlines() if x.startswith(f"REFUSED {what} ")), None)
    assert line is not None, done.stdout + done.stderr[-2000:]
    assert re.search(message, line), line


def test_only_the_named_profile_is_written(ran):
    _, home, _ = ran
    pytrio = home / ".pytrio"
    assert (pytrio / "envs" / "rlvr-local" / "config.toml").is_file()
    assert not (pytrio / "config.toml").exists() and not (pytrio / "env.toml").exists()
