"""The command line, one module per subcommand (`train`, `eval`, `compare`, `audit`,
`recipes`, `evalsize`, `show`) over the shared `common`; `main` dispatches. Only this
package parses arguments (the fronts' `python -m` runners aside: `rlvr.service.as_tinker`,
`rlvr.show.browser`)."""

from rlvr.cli.main import build_parser, main
from rlvr.cli.train import config_values

__all__ = ["build_parser", "config_values", "main"]
