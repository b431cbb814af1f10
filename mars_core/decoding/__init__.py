"""Decoders: one flat generator per strategy, the pieces they share, and their live settings.

- strategies.py: the strategy table (name -> decoder, the options it reads, its context headroom, whether it is
  lossless, its default threshold); generate(), stream(), the harness, mars-bench and the app read it;
- sliding.py: MARS sliding window with a KV cache (block_size 1 is plain AR), one sequence or a batch;
- block.py: the paper's block-level KV cache for batches (fixed shapes, positions aligned across the batch);
- verified/: verified MARS, the mask slots' drafts checked by the model's own predictions in the same forward
  (exactly greedy AR's answer), with lookup.py's prompt-lookup drafts as a second source; its rooms are listed in
  verified/__init__.py;
- commit.py (the answer buffer, the one commit step, the loop skeleton), spec.py (what a decoder is asked, what
  each forward reports), control.py (settings read at every forward), sampling.py (from logits to tokens),
  feed.py (the prompts, the cache a decode borrows, a tree's template, the logits read).

Every decoder feeds its forwards through runtime/forward.py into one kind of cache, a token's slot its position
(runtime/slots.py): how they run (kernels, fixed widths and CUDA graphs under a static runtime, llama.cpp) is the
runtime's and the engine's, never a second decoder.

Each decoder yields one `spec.Step` per model forward; `mars_core.generate` turns Steps into texts and events. A new
decoder is one module here and one entry in strategies.py.
"""
