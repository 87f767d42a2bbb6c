"""Run every benchmark under bench/ (or the ones named) and let each print its table.

Usage: python -m bench [NAME ...]   e.g. python -m bench sim_scale
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).parent
    names = argv or sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))
    failed = []
    for name in names:
        print(f"\n=== bench/{name}.py ===", flush=True)
        rc = subprocess.call([sys.executable, "-m", f"bench.{name}"], cwd=here.parent)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
