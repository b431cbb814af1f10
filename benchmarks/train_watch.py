"""A class watching one training: `python app.py` on the embedded model, one visitor starts the Train tab's default
training through the API (/train), N others watch it (/train_watch, each its own gradio_client session, asking every
2 s as the page's timer does), and one more races 16 tokens on the Race tab meanwhile. Kept: how often each watcher
saw new metrics (the longest gap between updates), how far behind the trainer's own stream it was, and the race's
seconds.

    python benchmarks/train_watch.py [--watchers 10] [--seconds 60] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.load_test import launched_app  # noqa: E402
from mars_core.machine import machine_info, machine_line  # noqa: E402

WATCH_SECONDS = 2.0  # the Train tab's timer (studio/train/tab.py)


def watcher(url: str, until: float, seen: list[tuple[float, int]]) -> None:
    """One watching visitor: ask /train_watch every WATCH_SECONDS, note (time, step, charts sent, seconds elapsed)
    whenever an update comes."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    while time.monotonic() < until:
        asked = time.monotonic()
        out = client.predict(api_name="/train_watch")
        status = out[2] if isinstance(out, (list, tuple)) else None
        if isinstance(status, str):  # an update: the status line (and the charts, when a step came)
            found = re.search(r"step (\d+)", status)
            elapsed = re.search(r"(\d+) s elapsed", status)
            seen.append((time.monotonic(), int(found.group(1)) if found else 0, isinstance(out[0], dict),
                         int(elapsed.group(1)) if elapsed else None))
        time.sleep(max(0.0, WATCH_SECONDS - (time.monotonic() - asked)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--watchers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the watchers watch")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    from gradio_client import Client

    with launched_app(None, timeout=900) as url:
        trainer = Client(url, verbose=False)
        while True:  # the served model and the Train tab's base ready (the page's status line empties)
            try:
                trainer.predict("Count from 1 to 3.", 0.9, 4, 0.0, 8, False, api_name="/race")
                break
            except Exception:  # noqa: BLE001 - still preparing
                time.sleep(5)
        job = trainer.submit("counting", "", 4, 400, 3, api_name="/train")
        started = time.monotonic()
        while not job.status().code.name == "PROCESSING" and time.monotonic() - started < 60:
            time.sleep(0.2)
        time.sleep(5)  # the training's first frames
        until = time.monotonic() + args.seconds
        seen: list[list] = [[] for _ in range(args.watchers)]
        threads = [threading.Thread(target=watcher, args=(url, until, s)) for s in seen]
        for t in threads:
            t.start()
        time.sleep(args.seconds / 2)
        racer = Client(url, verbose=False)
        began = time.monotonic()
        race = racer.predict("Count from one to ten", 0.9, 4, 0.0, 16, False, api_name="/race")
        race_seconds = time.monotonic() - began
        for t in threads:
            t.join()
        job.cancel()
    gaps, step_gaps = [], []
    for s in seen:  # any update (the clock, the bar), and an update that brought a new step
        times = [t for t, *_ in s]
        gaps.append(max((b - a for a, b in zip(times, times[1:])), default=None))
        stepped = [t for k, (t, step, *_) in enumerate(s) if k == 0 or step != s[k - 1][1]]
        step_gaps.append(max((b - a for a, b in zip(stepped, stepped[1:])), default=None))
    done = race[-1].get("status") if isinstance(race[-1], dict) else race[-1]
    record = {"command": "python benchmarks/train_watch.py " + " ".join(sys.argv[1:]),
              "machine": machine_line(machine_info()), "date": time.strftime("%F"), "watchers": args.watchers,
              "seconds": args.seconds, "updates_per_watcher": [len(s) for s in seen],
              "longest_gap_seconds": [round(g, 2) if g is not None else None for g in gaps],
              "median_longest_gap": round(statistics.median(g for g in gaps if g is not None), 2),
              "longest_gap_between_new_steps": [round(g, 2) if g is not None else None for g in step_gaps],
              "timeline_watcher_0": [(round(t - seen[0][0][0], 1), step, charts, sec)
                                     for t, step, charts, sec in seen[0]],
              "race_16_tokens_seconds": round(race_seconds, 2), "race_status": done}
    print(json.dumps(record, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
