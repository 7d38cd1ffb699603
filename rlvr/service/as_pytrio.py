"""Run scripts written for the PyTRIO SDK (`pytrio`, agentic-rl-lab's chapters), unmodified,
against rlvr's local service, through a server that speaks PyTRIO's wire protocol:

    python -m rlvr.service.as_pytrio serve --root DIR --model ALIAS=DIR [--model ...]
        [--port 0] [--profile NAME] [--seed N]
    python -m rlvr.service.as_pytrio run [serve options] -- script.py [script args...]

`serve` listens on 127.0.0.1 (port 0: a free one), writes the SDK profile
`~/.pytrio/envs/NAME/config.toml` (NAME: rlvr-local) with its URL and a local key, and
says to `export PYTRIO_ENV=NAME`. It never touches the SDK's default profile or
`~/.pytrio/env.toml`: with PYTRIO_BASE_URL and PYTRIO_API_KEY alone, the SDK would save
that URL and key into the default profile, and a later run meant for the real service
would come here. `run` starts the server on a free port, runs the script in a child
Python whose environment names the profile (PYTRIO_ENV, PYTRIO_BASE_URL, PYTRIO_API_KEY)
before it can import pytrio, and stops the server when the script ends, with its exit
status. docs/service.md, "Run agentic-rl-lab's chapters locally", lists what differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from rlvr.service.pytrio.runs import LocalTrio

PROFILE = "rlvr-local"
API_KEY = "rlvr-local"


def write_profile(name: str, url: str, home: Path | None = None) -> Path:
    """`~/.pytrio/envs/NAME/config.toml` pointing the SDK at `url`; nothing else written."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise ValueError(f"--profile {name!r} must be a plain name (letters, digits, - _ .)")
    path = (home or Path.home()) / ".pytrio" / "envs" / name / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"api_key = {json.dumps(API_KEY)}\nbase_url = {json.dumps(url)}\n")
    return path


def model_map(pairs: list[str]) -> dict[str, str]:
    models = {}
    for pair in pairs:
        alias, sep, directory = pair.partition("=")
        if not sep or not alias or not directory:
            raise ValueError(f"--model {pair!r} must be ALIAS=DIR (e.g. Qwen/Qwen3.5-4B=models/q)")
        if not Path(directory).is_dir():
            raise ValueError(f"--model {pair!r}: {directory!r} is not a local model directory")
        models[alias] = directory
    if not models:
        raise ValueError("give at least one --model ALIAS=DIR")
    return models


def start(options: argparse.Namespace, port: int):
    try:
        from rlvr.service.pytrio.http import Server
    except ImportError as err:  # msgpack, from the pytrio extra
        raise ValueError(
            f"the local PyTRIO server needs: pip install 'rlvr[pytrio]' ({err})"
        ) from None
    trio = LocalTrio(options.root, model_map(options.model), seed=options.seed)
    server = Server(trio, port)
    server.start()
    write_profile(options.profile, server.url)
    return server


def serve(options: argparse.Namespace) -> int:
    server = start(options, options.port)
    print(f"rlvr's local PyTRIO server: {server.url} (root {server.trio.root})", flush=True)
    for alias, directory in server.trio.models.items():
        print(f"  {alias} = {directory}", flush=True)
    print(f"In the shell that runs a script:  export PYTRIO_ENV={options.profile}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def run(options: argparse.Namespace) -> int:
    script = (
        [a for a in options.script if a != "--"] if options.script[:1] == ["--"] else options.script
    )
    if not script:
        raise ValueError("give the script to run after --: run [options] -- script.py [args]")
    server = start(options, 0)
    env = {
        **os.environ,
        "PYTRIO_ENV": options.profile,
        "PYTRIO_BASE_URL": server.url,
        "PYTRIO_API_KEY": API_KEY,
    }
    try:
        return subprocess.run([sys.executable, *script], env=env).returncode
    finally:
        server.stop()


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m rlvr.service.as_pytrio",
        description="Serve rlvr's local service over PyTRIO's wire protocol.",
    )
    commands = top.add_subparsers(dest="command", required=True)
    for name in ("serve", "run"):
        sub = commands.add_parser(name)
        sub.add_argument("--root", required=True, help="where states and weights are saved")
        sub.add_argument(
            "--model",
            action="append",
            default=[],
            metavar="ALIAS=DIR",
            help="serve the local model directory DIR under the name ALIAS (repeatable)",
        )
        sub.add_argument("--profile", default=PROFILE, help="the SDK profile to write")
        sub.add_argument("--seed", type=int, default=0, help="seeds LoRA and samplers")
        if name == "serve":
            sub.add_argument("--port", type=int, default=0, help="0: a free port")
        else:
            sub.add_argument("script", nargs=argparse.REMAINDER, help="-- script.py [args]")
    return top


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        return (serve if options.command == "serve" else run)(options)
    except ValueError as err:
        print(f"as_pytrio: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
