"""Record a real training for the Train tab's Replay: the defaults (the default corpus, B, steps and minutes) run
through the tab's own handlers on the embedded model, then the race of the trained model against its base on the
first held-out prompt; the points, the final check and the race's panes are kept with the machine and date.

    python -m studio.train.record [--out assets/train_recorded.json]
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

from mars_core.machine import machine_line
from mars_core.runtime.timing import write_json
from studio import inputs, models
from studio.train import loop as train_loop
from studio.train import state as train_state
from studio.train.state import TrainSession


def record(out: Path) -> dict:
    """Run the default training and its race as a visitor would, and keep what the page showed."""
    from mars_core.training.corpora import DEFAULT_CORPUS

    session = TrainSession()
    block, steps, minutes = (inputs.INPUTS[f"train-{k}"].value for k in ("block", "steps", "minutes"))
    models.get_model(train_state.base_name())  # prepared before Start, as the app preloads it
    pressed = time.monotonic()
    frames, first_point, verified_2 = [], None, None
    for frame in train_loop.train(DEFAULT_CORPUS, "", block, steps, minutes, session):  # as the page receives them
        frames.append(frame)
        points = frame[4].get("points", []) if isinstance(frame[4], dict) else []
        if points and first_point is None:
            first_point = time.monotonic() - pressed
        if verified_2 is None and any(p.get("probe") and p["verified_tokens_per_forward"] >= 2.0 for p in points):
            verified_2 = time.monotonic() - pressed
    ended = time.monotonic() - pressed
    metrics = frames[-1][4]
    if not isinstance(metrics, dict) or not metrics["state"].startswith("done"):
        raise SystemExit(f"the training did not finish: {frames[-1][-1]}")
    trained = train_state.kept(session)
    prompt = trained.held_out[0]["messages"][0]["content"]
    race = list(train_loop.race(prompt, session))[-1]
    model = models.get_model(train_state.base_name())[0]
    runtime = models.get_runtime(train_state.base_name())
    kept = {"command": "python -m studio.train.record", "date": datetime.date.today().isoformat(),
            "machine": machine_line(runtime.record(model)), "corpus": DEFAULT_CORPUS, "block_size": block,
            "max_steps": steps, "max_seconds": 60.0 * minutes,
            # seconds from pressing Start, as the page received them: the first point, the first probe's verified
            # >= 2.0 tokens per forward, the training and its check done
            "first_point_from_start": round(first_point or 0.0, 1), "done_from_start": round(ended, 1),
            "verified_2_from_start": round(verified_2, 1) if verified_2 else None,
            "steps": trained.steps, "final": trained.final,
            "points": metrics["points"], "summary": train_loop.trained_summary(trained.final, trained.steps),
            "race": {"prompt": prompt, "panes": list(race[:6]), "summary": race[6]}}
    write_json(out, kept, indent=1)
    return kept


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(train_loop.RECORDED), help="where the record goes")
    args = parser.parse_args(argv)
    kept = record(Path(args.out))
    print(f"recorded {len(kept['points'])} points on {kept['machine']}: {kept['summary']}")


if __name__ == "__main__":
    main()
