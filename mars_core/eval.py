"""`python -m mars_core.eval`: the mars-eval command (mars_core.evaluation.eval)."""

from .evaluation.eval import main

if __name__ == "__main__":
    main()
