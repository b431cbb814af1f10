"""lm-evaluation-harness task configs that run offline (YAML + local data); see docs/lm_eval.md.

TASKS_DIR is the folder to give lm-eval as --include_path (mars-lm-eval adds it by itself)."""

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
TASKS = ("mars_humaneval", "mars_humaneval_instruct", "mars_humaneval_chat", "mars_gsm_symbolic")
