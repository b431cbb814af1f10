import os

import pytest
import torch

from mars_core.runtime import prepared

from tiny import tiny_llama, tiny_qwen2, tiny_tokenizer

# The app launched by the tests (in process, or as `python app.py` by benchmarks/load_test.py) serves uncompiled unless
# a test asks: a background compile a launch would take both cores for a minute (the default, on a CPU: studio/cli.py)
os.environ.setdefault("MARS_COMPILE", "0")

# The files that take longest (the 60 slowest tests' durations summed by file: `python -m pytest -n 2 --dist loadfile
# --durations=60` on a 2-core VM) run first: xdist hands files out in collection order (pyproject:
# --no-loadscope-reorder), so the two workers end together; its default order, most tests first, left these few-test
# heavy files for last.
SLOWEST_FIRST = (
    "tests/test_default_model.py",
    "tests/studio/test_browser.py",
    "tests/spaces/test_space.py",
    "tests/training/test_train_cli.py",
    "tests/studio/test_app_e2e.py",
    "tests/decoding/test_verified.py",
    "tests/studio/test_load_test.py",
)


def pytest_collection_modifyitems(config, items):
    """The slowest files first, the rest in their collected order (a stable sort)."""
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer(mask_token=True)


@pytest.fixture(scope="session", params=["qwen2", "llama"])
def model(request, tokenizer):
    build = tiny_qwen2 if request.param == "qwen2" else tiny_llama
    model = build(len(tokenizer))
    prepared(model)  # the runtime generate() gives it, made now: a test that counts forwards counts the decode's
    return model


@pytest.fixture(autouse=True)
def _threads():
    """Tiny models run fastest on one thread (two shared cores stall on sync); real-model tests raise it."""
    torch.set_num_threads(1)
