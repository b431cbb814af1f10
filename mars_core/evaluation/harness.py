"""MARS Studio as an lm-evaluation-harness model: `mars_studio`.

    pip install -e ".[eval]"
    mars-lm-eval --model mars_studio \
        --model_args pretrained=default,strategy=verified,threshold=0.3,block_size=4,dtype=fp32 \
        --tasks mars_humaneval_instruct,mars_gsm_symbolic --apply_chat_template --confirm_run_unsafe_code

`mars-lm-eval` is lm-eval's own command line (every lm_eval argument works) with this model registered and the
offline tasks of mars_core/evaluation/lm_eval_tasks on the include path: lm-eval 0.4.x finds no models from
other packages by itself (it has no plugin entry points), so the plain `lm_eval` command needs
`import mars_core.evaluation.harness` first; in Python, import this module and call lm_eval.simple_evaluate.

- generate_until runs mars_core.generate: any strategy ("ar", "sliding", "block", "verified"), batched
  (--batch_size), stop sequences honoured, greedy unless a task asks for sampling;
- loglikelihood / loglikelihood_rolling are the model's own causal scoring (one forward, no masks), so
  multiple-choice and perplexity tasks work too;
- per task, tokens per forward and wall-clock seconds of generation land in the results JSON under
  config.mars_studio.tasks (and in the stats_path sidecar file when that model argument is given).
  tokens_per_forward counts the answer's tokens (up to the stop sequence, the end-of-sequence token included):
  tokens a decoder committed past a stop sequence are cut and not counted (committed_tokens_per_forward
  counts them).

model_args: pretrained (a name or path mars_core.load takes; "default" or none: the embedded model), strategy,
threshold (none: the strategy's default), block_size, dtype (auto, bf16, fp32), device, max_new_tokens (caps
every request's max_gen_toks; default: the task's), confidence, seed, stats_path, trust_remote_code, threads
(torch threads; on a busy machine 1 can be much faster than all cores), layout (fixed: verified trees by the fixed
rules, so tokens per forward is the same on every machine; cost: sized by this machine's cost curve).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import normalize_gen_kwargs
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

import mars_core

from ..decoding.strategies import NAMES as STRATEGIES
from ..decoding.verified import VerifiedConfig
from ..runtime.timing import write_json
from .lm_eval_tasks import TASKS_DIR
from .loading import load_prepared

MODEL_NAME = "mars_studio"
LAYOUTS = ("fixed", "cost")


def _none(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip().lower() in ("", "none", "null") else value


def _bool(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "y")


@register_model(MODEL_NAME)
class MarsStudioLM(TemplateLM):
    """An lm-eval model that decodes with MARS Studio's strategies (see the module docstring)."""

    def __init__(
        self,
        pretrained: Any = None,
        *,  # lm-eval passes model_args as keywords
        strategy: str = "verified",
        threshold: float | str | None = None,
        block_size: int | str = 4,
        dtype: str | None = None,
        device: str | None = None,
        batch_size: int | str | None = 1,
        max_batch_size: int | str | None = None,
        max_new_tokens: int | str | None = None,
        max_length: int | str | None = None,
        confidence: str = "prob",
        seed: int | str | None = None,
        stats_path: str | None = None,
        trust_remote_code: bool | str = False,
        threads: int | str | None = None,
        layout: str = "fixed",
        tokenizer: Any = None,
        **unused: Any,
    ) -> None:
        super().__init__()
        if _none(threads) is not None:  # on a busy CPU, one thread can be several times faster than two
            torch.set_num_threads(int(threads))
        strategy = str(strategy).strip().lower()
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        layout = str(layout).strip().lower()
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        # fixed: verified trees by the fixed rules, so tokens per forward is the model's, the same on every machine
        # (as in mars-eval); cost: sized by this machine's cost curve (faster here, machine-dependent)
        self.layout = VerifiedConfig(use_cost=layout == "cost")
        if isinstance(pretrained, torch.nn.Module):  # an already loaded model (with its tokenizer)
            if tokenizer is None:
                raise ValueError("pass the tokenizer along with a loaded model")
            self.model, self.tokenizer = pretrained.eval(), tokenizer
            self.runtime = mars_core.prepare(self.model, measure_cost=layout == "cost")
            self.source = getattr(pretrained.config, "_name_or_path", type(pretrained).__name__)
        else:
            pretrained, device = _none(pretrained), _none(device)
            if device is not None and str(device).startswith("cuda") and not torch.cuda.is_available():
                device = None  # lm-eval's command line passes --device cuda by default: run where we can
            self.source = pretrained or "default"
            self.model, self.tokenizer, self.runtime = load_prepared(
                pretrained, dtype=_none(dtype), device=device, trust_remote_code=_bool(trust_remote_code),
                measure_cost=layout == "cost")
        self.strategy = strategy
        self.threshold = None if _none(threshold) is None else float(threshold)
        self.block_size = int(block_size)
        self.batch_size = self._batch(batch_size)
        self.max_new_tokens = None if _none(max_new_tokens) is None else int(max_new_tokens)
        self._max_length = None if _none(max_length) is None else int(max_length)
        self.confidence = confidence
        self.seed = None if _none(seed) is None else int(seed)
        self.stats_path = _none(stats_path)
        self._device = self.model.device
        self.stats: dict[str, dict[str, float]] = defaultdict(
            lambda: {"requests": 0, "answer_tokens": 0, "generated_tokens": 0, "forwards": 0, "sample_forwards": 0,
                     "seconds": 0.0}
        )
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        self.stop_ids = {self.tokenizer.eos_token_id, *(gen_eos if isinstance(gen_eos, list) else [gen_eos])} - {None}

    @staticmethod
    def _batch(value: Any) -> int:
        value = _none(value)
        if value is None:
            return 1
        text = str(value).lower()
        if text.startswith("auto"):  # lm-eval's "auto" / "auto:N": no search here, a fixed batch
            return 8
        return max(int(text), 1)

    # ------------------------------------------------------------------ what lm-eval asks of a model

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        if self._max_length:
            return self._max_length
        return int(getattr(self.model.config, "max_position_embeddings", None) or 2048)

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "") or self.source).replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return list(self.tokenizer(string, add_special_tokens=bool(add_special_tokens))["input_ids"])

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )

    def get_model_info(self) -> dict:
        """Added by lm-eval to the results' "config": the decoding settings and, per task, speed."""
        return {MODEL_NAME: self.report()}

    def report(self) -> dict:
        tasks = {}
        for name, s in sorted(self.stats.items()):
            tasks[name] = {
                **s,
                "tokens_per_forward": round(s["answer_tokens"] / max(s["sample_forwards"], 1), 4),
                "committed_tokens_per_forward": round(s["generated_tokens"] / max(s["sample_forwards"], 1), 4),
                "tokens_per_second": round(s["generated_tokens"] / s["seconds"], 2) if s["seconds"] else None,
            }
        return {
            "pretrained": str(self.source), "strategy": self.strategy, "threshold": self.threshold,
            "block_size": self.block_size, "batch_size": self.batch_size, "max_new_tokens": self.max_new_tokens,
            "layout": "cost" if self.layout.use_cost else "fixed",
            "dtype": str(self.model.dtype).removeprefix("torch."), "device": str(self.model.device),
            "torch_threads": torch.get_num_threads(), "tasks": tasks,
        }

    # ------------------------------------------------------------------ generation

    def _settings(self, gen_kwargs: dict) -> tuple[list[str], int, float]:
        kwargs = normalize_gen_kwargs(dict(gen_kwargs), 256)
        until = kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_new = int(kwargs["max_gen_toks"])
        if self.max_new_tokens is not None:
            max_new = self.max_new_tokens
        temperature = float(kwargs.get("temperature", 0.0) or 0.0) if kwargs.get("do_sample") else 0.0
        return until, max_new, temperature

    def _fit(self, context: str, max_new: int) -> tuple[str, int]:
        """Keep prompt + max_new + the decoder's mask and draft slots inside the model's context: the answer
        budget shrinks first (to half the context at most), then the prompt loses its oldest tokens."""
        ahead = 2 * (self.block_size - 1)
        room = self.max_length - ahead
        max_new = max(1, min(max_new, room // 2 if room > 1 else 1))
        ids = self.tok_encode(context, add_special_tokens=True)
        if len(ids) + max_new > room:
            context = self.tokenizer.decode(ids[-(room - max_new):])
        return context, max_new

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        out: list[str | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            until, max_new, temperature = self._settings(req.args[1])
            groups[(req.task_name or "", tuple(until), max_new, temperature)].append(i)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc=f"mars_studio {self.strategy} generate_until")
        for (task, until, max_new, temperature), index in groups.items():
            index.sort(key=lambda i: -len(requests[i].args[0]))  # similar lengths share a batch
            for start in range(0, len(index), self.batch_size):
                chunk = index[start : start + self.batch_size]
                texts = self._generate([requests[i].args[0] for i in chunk], task, list(until), max_new, temperature)
                for i, text in zip(chunk, texts):
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(chunk))
        bar.close()
        self._write_stats()
        return out

    def _generate(self, contexts: list[str], task: str, until: list[str], max_new: int, temperature: float):
        fitted = [self._fit(c, max_new) for c in contexts]
        max_new = min(m for _, m in fitted)
        prompts = [c for c, _ in fitted]
        live = [i for i, c in enumerate(prompts) if c.strip()]
        texts = [""] * len(prompts)
        if not live:
            return texts
        result = mars_core.generate(
            self.model, self.tokenizer, [prompts[i] for i in live], strategy=self.strategy,
            threshold=self.threshold, block_size=self.block_size, max_new_tokens=max_new, stop_strings=until,
            temperature=temperature, seed=self.seed, confidence=self.confidence, chat=False, layout=self.layout,
            runtime=self.runtime,
        )
        for i, ids in zip(live, result.token_ids):
            texts[i] = self.answer_text(ids, until)
        s = self.stats[task]
        s["requests"] += len(prompts)
        s["answer_tokens"] += sum(self.answer_tokens(ids, texts[i]) for i, ids in zip(live, result.token_ids))
        s["generated_tokens"] += result.generated_tokens
        s["forwards"] += result.forwards
        s["sample_forwards"] += sum(result.sample_forwards) if result.sample_forwards else result.forwards
        s["seconds"] += result.seconds
        return texts

    def answer_text(self, ids: list[int], until: list[str]) -> str:
        """The answer lm-eval expects: the committed tokens' text, cut before the first stop sequence. Decoded
        from the tokens rather than taken from GenerationResult.texts, which joins what each forward added: when
        a stop sequence begins in text an earlier forward added, that beginning stays there, so the same tokens
        would give different texts when they came in different forwards (one-token against verified decoding)."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        for stop in until:
            if stop:
                text = text.split(stop, 1)[0]
        return text

    def answer_tokens(self, ids: list[int], text: str) -> int:
        """How many of a sample's committed tokens the returned answer is made of: the fewest that decode to its
        text, plus the end-of-sequence token when one ended it. A decoder that commits several tokens per forward
        can commit some past a stop sequence; they are cut from the answer, and not counted as its tokens."""
        lo, hi = 0, len(ids)
        while lo < hi:  # the smallest k whose decoded text is as long as the answer
            mid = (lo + hi) // 2
            if len(self.tokenizer.decode(ids[:mid], skip_special_tokens=True)) >= len(text):
                hi = mid
            else:
                lo = mid + 1
        return lo + int(lo < len(ids) and ids[lo] in self.stop_ids)

    def _write_stats(self) -> None:
        """Keep the per-task statistics at stats_path (written atomically, as every measured value is)."""
        if self.stats_path:
            write_json(self.stats_path, self.report(), indent=2)

    # ------------------------------------------------------------------ scoring

    @torch.inference_mode()
    def _loglikelihood_tokens(self, requests: list, disable_tqdm: bool = False, **kwargs: Any) -> list:
        """Sum of log-probabilities of each continuation after its context, and whether it is the greedy one."""
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1]) - len(requests[i][2]))
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        size = max(self.batch_size, 1)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eot_token_id
        for start in tqdm(range(0, len(order), size), disable=disable_tqdm, desc="mars_studio loglikelihood"):
            chunk = order[start : start + size]
            rows, spans = [], []
            for i in chunk:
                _, context, continuation = requests[i]
                whole = (list(context) + list(continuation))[-(self.max_length + 1) :]
                rows.append(whole[:-1])
                spans.append(len(continuation))
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for k, row in enumerate(rows):  # right padding: the real tokens keep positions 0..n-1
                ids[k, : len(row)] = torch.tensor(row, dtype=torch.long)
                mask[k, : len(row)] = 1
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            for k, i in enumerate(chunk):
                n, m = len(rows[k]), spans[k]
                logp = F.log_softmax(logits[k, n - m : n].float(), dim=-1)
                target = torch.tensor(requests[i][2][-m:], dtype=torch.long, device=logp.device)
                score = float(logp.gather(1, target[:, None]).sum())
                greedy = bool((logp.argmax(-1) == target).all())
                out[i] = (score, greedy)
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], (score, greedy))
        return out

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        scores = []
        for req in tqdm(requests, disable=disable_tqdm, desc="mars_studio loglikelihood_rolling"):
            (text,) = req.args
            windows = [
                make_disjoint_window(w)
                for w in get_rolling_token_windows(
                    token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1,
                )
            ]
            parts = self._loglikelihood_tokens([(None, c, t) for c, t in windows], disable_tqdm=True)
            score = sum(s for s, _ in parts)
            scores.append(score)
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), score)
        return scores


def main(argv: list[str] | None = None) -> None:
    """`mars-lm-eval`: lm-eval's command line with `mars_studio` registered and the offline tasks included."""
    from lm_eval.__main__ import cli_evaluate

    args = list(sys.argv[1:] if argv is None else argv)
    helping = not args or any(a in ("-h", "--help") for a in args)
    if not helping and not any(a == "--include_path" or a.startswith("--include_path=") for a in args):
        args += ["--include_path", str(TASKS_DIR)]  # run, ls and validate all take it
    sys.argv = ["mars-lm-eval", *args]
    cli_evaluate()


if __name__ == "__main__":
    main()
