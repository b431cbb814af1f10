"""Decoders: one flat generator per strategy, the pieces they share, and their live settings.

- strategies.py: the strategy table (name -> decoder, the options it reads, its context headroom, whether it is
  lossless, its default threshold); generate(), stream(), the harness, mars-bench and the app read it;
- sliding.py: MARS sliding window with a KV cache (block_size 1 is plain AR), one sequence or a batch;
- block.py: the paper's block-level KV cache for batches (fixed shapes, positions aligned across the batch);
- verified/: verified MARS, the mask slots' drafts checked by the model's own predictions in the same forward
  (exactly greedy AR's answer), with lookup.py's prompt-lookup drafts as a second source; its rooms are listed in
  verified/__init__.py;
- static/: the same one-token, threshold and verified decoding fed at a few fixed widths into a KV cache allocated once
  and written by index, acceptance on the device, one host copy a forward (the step CUDA graphs capture); the strategy
  table's `static` entries, run where the runtime asks (Runtime.static);
- commit.py (the answer buffer, the one commit step, the loop skeleton), spec.py (what a decoder is asked, what
  each forward reports), control.py (settings read at every forward), sampling.py (from logits to tokens),
  cache.py (left padding).

Each decoder yields one `spec.Step` per model forward; `mars_core.generate` turns Steps into texts and events. A new
decoder is one module here and one entry in strategies.py.
"""
