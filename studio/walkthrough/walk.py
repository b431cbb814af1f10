"""What the two walkthroughs share: a visitor's stepped decode (Walk), its run in a generation slot, token chips."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from studio import models
from studio.inputs import check_inputs
from studio.lanes import guarded

CELL = 'style="border:1px solid #e2e8f0;padding:4px 10px"'  # a table cell of the walkthroughs' views


@dataclass
class Walk:
    """One visitor's stepped decode (a gr.State of each walkthrough): every forward, and the one on screen."""

    steps: list[dict] = field(default_factory=list)  # each forward as the page shows it (walk_steps, verified_step)
    index: int = 0  # the forward on screen

    def moved(self, delta: int) -> Walk:
        """The same decode, `delta` forwards on (Previous/Next), kept within its forwards."""
        return Walk(self.steps, min(max(self.index + int(delta), 0), max(len(self.steps) - 1, 0)))


def token_chip(text: str, colour: str = "#e2e8f0") -> str:
    """A token as a small chip with visible whitespace."""
    shown = html.escape(text).replace("\n", "↵").replace(" ", "␣") or "∅"
    return (f'<code style="background:{colour};padding:1px 5px;margin:1px;border-radius:4px;'
            f'white-space:pre;display:inline-block">{shown}</code>')


def checked_in_a_slot(inputs: tuple, tab: str, run: Callable[..., Iterator], failure: Callable[[str], tuple],
                      waiting: Callable[[str], tuple]) -> Iterator[tuple]:
    """Check (prompt, threshold, block size, max new tokens), then run(prompt, tau, block, new) in a generation slot,
    saying so (waiting(what)) while every slot is taken and while the model is being prepared; bad input or an error
    is one message."""
    prompt, threshold, block_size, max_new_tokens = inputs
    try:
        prompt, tau, block, _, new = check_inputs(prompt, threshold, block_size, 0.0, max_new_tokens, tab=tab)
    except ValueError as err:
        yield failure(str(err))
        return

    def prepared_then_run() -> Iterator[tuple]:
        for said in models.preparing([models.CONFIG.model]):  # the page's line is markdown; the view is HTML
            yield waiting(html.escape(said.replace("**", "")))
        yield from run(prompt, tau, block, new)

    yield from models.in_a_slot(guarded(prepared_then_run(), failure, "Decoding"), lambda: waiting(models.WAITING))
