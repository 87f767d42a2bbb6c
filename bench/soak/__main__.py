"""`python -m bench soak` runs this (bench/__main__.py starts `python -m bench.soak`)."""

from __future__ import annotations

import sys

from bench.soak.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
