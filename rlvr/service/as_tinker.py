"""Run a script written for the Tinker SDK, unmodified, against the local service:

    python -m rlvr.service.as_tinker [--root DIR] [--seed N] script.py [script args...]
    python -m rlvr.service.as_tinker [--root DIR] -m tinker_cookbook.recipes.rl_loop [args...]

For that run only, `tinker.ServiceClient` is rlvr's local service. Where the `tinker` SDK
is installed, that one name is replaced and every other stays the SDK's (its types are
accepted by the service): tinker-cookbook imports much of the SDK. Where it is not,
`import tinker`, `tinker.types` and `tinker.types.tensor_data` resolve to
`rlvr.service.tinker_compat`. Nothing is installed and no other process sees it; use
`installed()` to do the same inside Python (tests). docs/service.md lists what differs.
"""

from __future__ import annotations

import argparse
import importlib
import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from rlvr.service import tinker_compat

ALIASES = {
    "tinker": tinker_compat,
    "tinker.types": tinker_compat.types,
    "tinker.types.tensor_data": tinker_compat.types,
}


def tinker_sdk() -> ModuleType | None:
    """The installed `tinker` SDK, or None (absent, or aliased to the drop-in)."""
    module = sys.modules.get("tinker")
    if module is None:
        try:
            module = importlib.import_module("tinker")
        except ImportError:
            return None
    return None if module is tinker_compat else module


@contextmanager
def installed(*, sdk: bool | None = None, **local_options) -> Iterator[None]:
    """Inside the block `tinker.ServiceClient` is the local service, whose ServiceClients
    take `local_options` (root, seed, ...). `sdk`: replace only that name in the installed
    SDK (True), alias the whole package to the drop-in (False), or the first where the
    SDK is installed (None). Everything is restored after."""
    module = tinker_sdk() if sdk is not False else None
    if sdk and module is None:
        raise ValueError(
            "installed(sdk=True): the tinker SDK is not installed (pip install tinker)"
        )
    saved_options = dict(tinker_compat.LOCAL_OPTIONS)
    tinker_compat.LOCAL_OPTIONS.update(local_options)
    saved = {name: sys.modules.get(name) for name in ALIASES}
    if module is not None:
        sdk_client = module.ServiceClient
        module.ServiceClient = tinker_compat.ServiceClient
    else:
        sys.modules.update(ALIASES)
    try:
        yield
    finally:
        if module is not None:
            module.ServiceClient = sdk_client
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value
        tinker_compat.LOCAL_OPTIONS.clear()
        tinker_compat.LOCAL_OPTIONS.update(saved_options)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rlvr.service.as_tinker",
        description="Run a Tinker SDK script against rlvr's local service.",
    )
    parser.add_argument("--root", help="where save_state and save_weights_for_sampler write")
    parser.add_argument("--seed", type=int, help="the service's seed (default 0)")
    parser.add_argument("-m", dest="module", help="run this module as __main__ (as python -m)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="script.py and its own arguments")
    options = parser.parse_args(argv)
    if options.module is None and not options.args:
        parser.error("give a script to run, or -m MODULE")
    local = {k: v for k, v in (("root", options.root), ("seed", options.seed)) if v is not None}
    with installed(**local):
        if options.module is not None:
            sys.argv = [options.module, *options.args]
            runpy.run_module(options.module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(options.args)
            runpy.run_path(options.args[0], run_name="__main__")


if __name__ == "__main__":
    main()
