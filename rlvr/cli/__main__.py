"""`python -m rlvr.cli ...`: the same command line as the `rlvr` script."""

import sys

from rlvr.cli.main import main

sys.exit(main())
