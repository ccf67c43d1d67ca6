# The two commands of the README. Both run the idempotent set-up first.
.PHONY: setup demo test lint bench progs

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/bpfbatch demo

# Four workers by default on two CPUs (pytest-xdist): many tests wait on a signalled child
# process or a netns, which the extra workers fill (quiet, 4271 tests: three workers 10:12,
# four 8:51); PYTEST_JOBS=0 runs in one process.
PYTEST_JOBS ?= 4

test: setup lint
	.venv/bin/python -m pytest -n $(PYTEST_JOBS) $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check bpfbatch tests tools

# make bench SUITE=maps (or tc, ...), BENCH_ARGS="..." for its options.
bench: setup
	.venv/bin/python -m tools.bench $(SUITE) $(BENCH_ARGS)

progs:
	$(MAKE) -C progs
