"""load_prepared: what mars-eval, mars-bench and the harness run on (a model loaded, an adapter merged, a runtime)."""

from __future__ import annotations

import copy

import torch

from mars_core.evaluation.loading import load_prepared

from tiny import tiny_qwen2, tiny_tokenizer


def test_an_adapter_is_merged_before_the_runtime_is_prepared(tmp_path):
    from peft import LoraConfig, get_peft_model

    tokenizer = tiny_tokenizer(mask_token=True)
    base = tiny_qwen2(len(tokenizer))
    base.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    lora = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        want = lora(ids).logits
    model, tok, runtime = load_prepared(str(tmp_path / "base"), str(tmp_path / "adapter"), dtype="fp32",
                                        check=False, measure_cost=False)
    assert tok.mask_token is not None and runtime.cost is None and runtime.width_check is None
    assert not any("lora" in name for name, _ in model.named_parameters())  # merged: no extra parameters
    with torch.no_grad(), runtime.active():  # the runtime answers with the merged weights
        torch.testing.assert_close(model(ids).logits, want, atol=1e-4, rtol=1e-4)
    plain, _, _ = load_prepared(str(tmp_path / "base"), dtype="fp32", check=False, measure_cost=False)
    with torch.no_grad():
        assert not torch.allclose(plain(ids).logits, want, atol=1e-3)  # the adapter changed the answer
