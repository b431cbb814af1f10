"""Engines other than torch that run the decoders' forwards (runtime.engine.Engine subclasses): llama.cpp so far.

Each lives in its own subpackage and imports its binding lazily, so `import mars_core` never needs one installed.
"""
