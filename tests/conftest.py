"""Shared test set-up: tests under tests/kernel need root and the real kernel."""

import os

import pytest


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: runs against the real kernel")
    for item in items:
        if "tests/kernel/" in str(item.fspath):
            item.add_marker(skip)
