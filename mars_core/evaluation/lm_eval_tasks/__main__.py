"""`python -m mars_core.evaluation.lm_eval_tasks` prints the tasks folder, for lm-eval's --include_path."""

from . import TASKS_DIR

print(TASKS_DIR)
