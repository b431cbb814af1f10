"""Static-shape decoding: one-token, threshold and verified MARS fed at a few fixed widths into a KV cache allocated
once and written by index, acceptance and the commit on the device, one small host copy a forward: the shape of a
decode step that CUDA graphs can capture. Runtime.static asks for it (strategies.start picks it).

    slots.py    SlotCache: transformers' StaticCache written from a slot on the device, which slots are real, the mask
    buckets.py  Bucket, the fixed trees by width; the plan that prices a whole step by its width
    decode.py   static_decode, the loop: prefill and threshold forwards, verified forwards
"""

from .decode import static_decode

__all__ = ["static_decode"]
