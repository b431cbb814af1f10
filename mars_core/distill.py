"""`python -m mars_core.distill`: the mars-distill command (mars_core.evaluation.distill)."""

from .evaluation.distill import main

if __name__ == "__main__":
    main()
