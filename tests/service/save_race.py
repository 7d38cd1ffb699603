"""A process that saves one name over and over with `rlvr.service.saves.write_save`, each
save a directory of FILES files that all hold the same token (this process's id and a
counter): test_service_security.py kills it at random moments (F16) or runs two at once
(F17), then checks that the name always holds one whole save. Imports no torch (saves.py
by its path), so it starts in a blink.

    python save_race.py TARGET COUNT TAG
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# saves.py by its path: `import rlvr.service.saves` would run the package's __init__ (torch)
SAVES = Path(__file__).parents[2] / "rlvr" / "service" / "saves.py"
spec = importlib.util.spec_from_file_location("saves", SAVES)
saves = importlib.util.module_from_spec(spec)
spec.loader.exec_module(saves)

FILES = 8


def main(target: str, count: str, tag: str) -> None:
    for i in range(int(count)):
        token = f"{tag}-{i}"

        def write(directory: Path, token: str = token) -> None:
            for k in range(FILES):
                (directory / f"part-{k}").write_text(token * 2000)

        saves.write_save(Path(target), "state", write, overwrite=True, what="save_state")
        if i == 0:  # the test kills us only after this: a kill then lands inside the loop
            print("saved", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
