"""The prompts the training data and the never-trained split are built from (mars-distill reads them; the engine,
mars_core, does not).

- tasks.py: the programmatic sources with golds (lists, counting, tables, ...), chat and reasoning, and
  `build_prompts`, which draws distinct prompts per category from one seeded RNG;
- sources.py with code.py, writing.py, everyday.py, translation.py: prompts that look like use;
- never_trained.py: the never-trained split's sources (hand-written prompts, gsm_symbolic, HumanEval);
- fill.py and phrasing.py: the template filler and the user-like phrasing every source shares.

Every word list, phrase and template is data, in banks/<source>.json; the modules hold what needs logic (the order of
the random draws, golds). A seed gives the same prompts on every machine.
"""

from .never_trained import never_trained_prompts
from .sources import SOURCE_CATEGORIES, SOURCES, build_source_prompts, distinct_counts
from .tasks import GENERATORS, RG_TASKS, build_prompts

__all__ = [
    "GENERATORS",
    "RG_TASKS",
    "SOURCES",
    "SOURCE_CATEGORIES",
    "build_prompts",
    "build_source_prompts",
    "distinct_counts",
    "never_trained_prompts",
]
