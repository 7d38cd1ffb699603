"""Run a script written for the Tinker SDK, unmodified, against the local service:

    python -m rlvr.service.as_tinker [--root DIR] [--seed N] script.py [script args...]

For that run only, `import tinker`, `tinker.types` and `tinker.types.tensor_data` resolve
to `rlvr.service.tinker_compat`; nothing is installed and no other process sees it. Use
`installed()` to do the same inside Python (tests). docs/service.md lists what differs.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rlvr.service import tinker_compat

ALIASES = {
    "tinker": tinker_compat,
    "tinker.types": tinker_compat.types,
    "tinker.types.tensor_data": tinker_compat.types,
}


@contextmanager
def installed(**local_options) -> Iterator[None]:
    """`import tinker` gives `rlvr.service.tinker_compat` inside the block, whose
    ServiceClients take `local_options` (root, seed, ...); sys.modules is restored after."""
    saved = {name: sys.modules.get(name) for name in ALIASES}
    saved_options = dict(tinker_compat.LOCAL_OPTIONS)
    sys.modules.update(ALIASES)
    tinker_compat.LOCAL_OPTIONS.update(local_options)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        tinker_compat.LOCAL_OPTIONS.clear()
        tinker_compat.LOCAL_OPTIONS.update(saved_options)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rlvr.service.as_tinker",
        description="Run a Tinker SDK script against rlvr's local service.",
    )
    parser.add_argument("--root", help="where save_state and save_weights_for_sampler write")
    parser.add_argument("--seed", type=int, help="the service's seed (default 0)")
    parser.add_argument("script", help="the Python file to run as __main__")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    options = parser.parse_args(argv)
    local = {k: v for k, v in (("root", options.root), ("seed", options.seed)) if v is not None}
    sys.argv = [options.script, *options.args]
    with installed(**local):
        runpy.run_path(options.script, run_name="__main__")


if __name__ == "__main__":
    main()
