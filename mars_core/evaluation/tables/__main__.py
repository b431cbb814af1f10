"""`python -m mars_core.evaluation.tables`: render every table in README.md and docs/*.md from the kept records."""

import sys

from . import main

sys.exit(main())
