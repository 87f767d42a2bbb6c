"""Run every benchmark under bench/ (or the ones named) and let each print its table.

Usage: python -m bench [NAME ...] [-- ARGS]   e.g. python -m bench sim_scale
       python -m bench scale_10k --db sqlite   (one bench: what follows its name is its own)

Options after a single bench's name are that bench's (they used to be taken for more bench
names, so `python -m bench scale_10k --db sqlite` ran the bench at its defaults and then failed
on benches called `--db` and `sqlite`); with several names, `--` starts the options they all get.
One bench named alone answers with its own exit code. A bench that is a package (bench/soak/,
the chaos soak) runs only when named.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(bench names, options passed to each)."""
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    first_option = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    return argv[:first_option], argv[first_option:]


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).parent
    names, options = split(argv)
    if options and len(names) != 1 and "--" not in argv:
        print("options follow one bench's name, or `--` for several", file=sys.stderr)
        return 2
    names = names or sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))
    failed = []
    for name in names:
        shown = f"{name}.py" if (here / f"{name}.py").exists() else f"{name}/"
        print(f"\n=== bench/{shown} ===", flush=True)
        rc = subprocess.call([sys.executable, "-m", f"bench.{name}", *options], cwd=here.parent)
        if len(names) == 1:
            return rc  # one bench: its own exit code (the soak's 1, 2 and 3 mean different things)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
