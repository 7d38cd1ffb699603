"""`python -m rlvr ...`: the same command line as the `rlvr` script."""

import sys

from rlvr.cli import main

if __name__ == "__main__":
    sys.exit(main())
