import pytest
import torch

from mars_core.runtime import prepared

from tiny import tiny_llama, tiny_qwen2, tiny_tokenizer


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
