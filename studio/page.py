"""The page's frame, shared by every tab: its CSS and theme, the tagline, and the folded introduction naming the
models served (with the embedded model's held-out figures, read from its shipped eval)."""

from __future__ import annotations

import json
import os

import gradio as gr

from studio import engine, lanes, models
from studio.race.html import LANE_CSS, verified_guarantee

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CSS = (".gradio-container {max-width: 1400px !important; margin: 0 auto; min-width: 0 !important; width: 100%}"
       "#tagline h2{margin:0}#model-status p{margin:0}"
       # a phone: the settings Gradio groups in one row (a form) take a line each instead of running off the screen
       "@media (max-width: 640px){.gradio-container .form{flex-wrap:wrap}"
       ".gradio-container .form>*{min-width:100% !important}}"
       # wide content (a displayed equation, the sweep's table) scrolls inside its box rather than widening the page
       ".katex-display{overflow-x:auto;overflow-y:hidden;max-width:100%}#sweep-table{overflow-x:auto;max-width:100%}"
       + lanes.PANE_CSS + LANE_CSS)
THEME = gr.themes.Soft(primary_hue="blue")


def default_model_note(report: str = os.path.join(ROOT, "assets", "records", "model", "eval_smollm2_mars_b4.json"),
                       ) -> str:
    """One line on the embedded model: its held-out tokens per forward at τ = 0.9 and in verified mode, read from
    the shipped eval (the verified figure only where the eval has verified rows)."""
    try:
        with open(report) as f:
            rows = {(r.get("strategy", "sliding"), r["threshold"], r["category"]): r for r in json.load(f)["rows"]}
        tpf = {c: rows[("sliding", 0.9, c)]["tokens_per_forward"] for c in ("all", "predictable")}
    except (OSError, KeyError, ValueError):
        return ""
    checked = [r["tokens_per_forward"] for (s, _, c), r in rows.items() if s == "verified" and c == "all"]
    verified = (f"; verified, {checked[0]:.2f} tokens per forward with the one-token answers" if checked else "")
    return (f" The embedded default is SmolLM2-135M with a MARS LoRA fine-tune (B = 4): at τ = 0.9 it commits "
            f"{tpf['all']:.2f} tokens per forward on held-out prompts ({tpf['predictable']:.2f} on predictable ones "
            f"such as lists and tables){verified}.")


TAGLINE = ("## MARS Studio <span style='font-size:0.6em;font-weight:normal'>one prompt, three decoders racing: AR, "
           "MARS at a threshold τ and MARS verified</span>")


def intro_markdown() -> str:
    """What the app shows and which models it serves (folded under the tagline)."""
    config = models.CONFIG
    ar = models.model_label(config.ar_model) if config.ar_model else "the same checkpoint, one token per forward"
    note = default_model_note() if not config.model else ""
    if engine.on_llamacpp():  # the race's engine; the other tabs decode the torch model
        note += (f" The race decodes on {engine.label()} (the same checkpoint as a GGUF, trees sized by llama.cpp's "
                 "own cost curve); the other tabs run it on torch.")
    return (
        "MARS lets an ordinary causal LM commit several tokens per forward: each forward reads the last real "
        "token plus B−1 mask tokens and keeps the predictions whose confidence reaches the threshold τ "
        "(τ = 1 is exactly one-token decoding). *Verified* MARS checks those predictions with the model's own "
        "in the next forward, so its answer is one-token decoding's ("
        f"{verified_guarantee(True)}, bit for bit, where the machine's forwards pass the width check that "
        "mars_core.prepare runs; the verified lane's title says whether this one did), in fewer forwards.  \n"
        f"MARS model: {models.model_label(config.model)} · AR baseline: {ar}.{note}"
    )
