"""``python -m tools.bench SUITE [options]``: run one benchmark suite (a module of this package
with a ``main(argv)``); without a suite name, list them."""

import importlib
import pkgutil
import sys

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
    module = importlib.import_module(f"tools.bench.{sys.argv[1]}")
    return module.main(sys.argv[2:]) or 0


if __name__ == "__main__":
    sys.exit(main())
