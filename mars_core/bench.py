"""`python -m mars_core.bench`: the mars-bench command (mars_core.evaluation.bench)."""

from .evaluation.bench import main

if __name__ == "__main__":
    main()
