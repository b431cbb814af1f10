"""Decoders: one flat generator per strategy (sliding, block), the pieces they share, and their live settings.

Each decoder yields one `spec.Step` per model forward; `mars_core.generate` turns Steps into texts and events.
"""
