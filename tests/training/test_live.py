"""train_live: the real trainers on a tiny model, every step's losses streamed, probes at the start, on their clock and
at the end, Stop and the time budget ending the run with what was learned kept, merged() a plain equal model."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from mars_core.training.corpora import corpus_split
from mars_core.training.live import LiveConfig, merged, train_live

from tiny import tiny_qwen2, tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(mask_token=True)


@pytest.fixture(scope="module")
def examples():
    return corpus_split("counting", train=24, held_out=2)[0]


def fresh(tokenizer):
    return tiny_qwen2(len(tokenizer), seed=1).train()


def test_every_step_streams_its_losses_and_probes_come_at_start_and_end(tokenizer, examples):
    stream, probed = [], []

    def probe(model):
        assert not model.training
        probed.append(1)
        return {"tau_tokens_per_forward": 1.0, "verified_tokens_per_forward": 1.0 + len(probed)}

    config = LiveConfig(block_size=3, max_steps=6, batch_size=2, probe_seconds=3600)
    wrapped, callback = train_live(fresh(tokenizer), tokenizer, examples, config, stream.append, probe)
    steps = [m for m in stream if "ar_loss" in m]
    assert [m["step"] for m in steps] == list(range(1, 7))
    assert all(len(m["slot_losses"]) == 2 and m["ar_loss"] > 0 and m["noisy_loss"] > 0 for m in steps)
    assert steps[-1]["noisy_loss"] < steps[0]["noisy_loss"]  # it learns
    probes = [m for m in stream if m.get("probe")]
    assert [m["step"] for m in probes] == [0, 6] and probes[-1]["verified_tokens_per_forward"] == 3.0
    assert [m["seconds"] for m in stream] == sorted(m["seconds"] for m in stream)
    assert callback.stopped_by == "" and callback.steps == 6 and not wrapped.training


def test_stop_ends_the_run_at_the_next_step_keeping_what_it_learned(tokenizer, examples):
    stop, stream = threading.Event(), []

    def emit(metrics):
        stream.append(metrics)
        if metrics.get("step") == 3:
            stop.set()

    model = fresh(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped, callback = train_live(model, tokenizer, examples, LiveConfig(max_steps=500, batch_size=2), emit,
                                   stop=stop)
    assert callback.stopped_by == "stop" and max(m["step"] for m in stream) == 4  # the step under way ends
    plain = merged(wrapped)
    assert any(not torch.equal(before[k], v) for k, v in plain.state_dict().items() if k in before)


def test_the_time_budget_ends_the_run(tokenizer, examples):
    start = time.monotonic()
    _, callback = train_live(fresh(tokenizer), tokenizer, examples,
                             LiveConfig(max_steps=10_000, max_seconds=1.0, batch_size=2), lambda m: None)
    assert callback.stopped_by == "seconds" and time.monotonic() - start < 30


def test_merged_is_a_plain_model_with_the_wrapped_ones_outputs(tokenizer, examples):
    wrapped, _ = train_live(fresh(tokenizer), tokenizer, examples, LiveConfig(max_steps=3, batch_size=2),
                            lambda m: None)
    plain = merged(wrapped)
    assert type(plain).__name__ == "Qwen2ForCausalLM" and plain.config.use_cache and not plain.training
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, wrapped(input_ids=ids).logits, atol=1e-4, rtol=1e-4)
    assert "lora" in " ".join(n for n, _ in wrapped.named_modules())  # the wrapped one is left as it was


def test_the_ar_only_control_trains_without_a_noisy_stream(tokenizer, examples):
    stream = []
    train_live(fresh(tokenizer), tokenizer, examples, LiveConfig(method="sft", max_steps=12, batch_size=2),
               stream.append)
    steps = [m for m in stream if "ar_loss" in m]
    assert [m["step"] for m in steps] == list(range(1, 13))
    assert all(m["slot_losses"] == [] and m["noisy_loss"] is None for m in steps)  # the SFT loss is the AR loss alone
    assert sum(m["ar_loss"] for m in steps[-3:]) / 3 < 0.8 * steps[0]["ar_loss"], [m["ar_loss"] for m in steps]


@pytest.mark.parametrize("bad", [dict(method="dpo"), dict(block_size=0), dict(max_steps=0), dict(max_seconds=0)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        LiveConfig(**bad)


def test_mars_needs_a_mask_token(examples):
    tokenizer = tiny_tokenizer(mask_token=False)
    with pytest.raises(ValueError, match="mask token"):
        train_live(tiny_qwen2(len(tokenizer)), tokenizer, examples, LiveConfig(max_steps=1), lambda m: None)


def test_lora_on_the_top_layers_only_leaves_the_lower_ones_and_the_mask_row_frozen(tokenizer):
    """LiveConfig(lora_layers=1, train_mask_row=False): adapters on the last decoder layer alone, no trainable
    embedding row (so the backward stops there); the default adapts every layer and the mask row."""
    from mars_core.training.live import with_lora

    def adapted(config: LiveConfig) -> tuple[set[int], bool]:
        model = with_lora(fresh(tokenizer), config, tokenizer.mask_token_id)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        layers = {int(n.split("layers.")[1].split(".")[0]) for n in names if "lora_" in n}
        return layers, any("embed" in n for n in names)

    last = fresh(tokenizer).config.num_hidden_layers - 1
    assert adapted(LiveConfig(lora_layers=1, train_mask_row=False)) == ({last}, False)
    assert adapted(LiveConfig()) == (set(range(last + 1)), True)
