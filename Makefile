# The two commands of the README. Both run the idempotent set-up first.
.PHONY: setup demo test lint bench progs

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/bpfbatch demo

test: setup lint
	.venv/bin/python -m pytest $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check bpfbatch tests tools

# make bench SUITE=maps (or tc, ...), BENCH_ARGS="..." for its options.
bench: setup
	.venv/bin/python -m tools.bench $(SUITE) $(BENCH_ARGS)

progs:
	$(MAKE) -C progs
