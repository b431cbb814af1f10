"""`python -m mars_core.train`: the mars-train command (mars_core.training.cli)."""

from .training.cli import main

if __name__ == "__main__":
    main()
