"""``python -m tools.bench SUITE [options]``: run one benchmark suite (a module of this package
with a ``main(argv)``); without a suite name, list them.

The package's bytecode is compiled before any suite runs, as an installed package's is: with
``PYTHONDONTWRITEBYTECODE`` set, every whole-process ``bpfbatch`` run would otherwise compile
its modules again (~0.06–0.1 s here) and time that instead of the work."""

import compileall
import importlib
import pkgutil
import sys
from pathlib import Path

import bpfbatch
import tools.bench as package

_NOT_SUITES = {"harness", "refresher", "__main__"}  # helpers, not suites


def _suites() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in _NOT_SUITES)


def main() -> int:
    suites = _suites()
    if len(sys.argv) < 2 or sys.argv[1] not in suites:
        print("usage: python -m tools.bench SUITE [options]\nsuites: " + ", ".join(suites),
              file=sys.stderr)
        return 2
    compileall.compile_dir(Path(bpfbatch.__file__).parent, quiet=1)
    module = importlib.import_module(f"tools.bench.{sys.argv[1]}")
    return module.main(sys.argv[2:]) or 0


if __name__ == "__main__":
    sys.exit(main())
