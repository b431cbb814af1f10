"""The Batch tab: several prompts as one block-cached batch against AR: its layout, loop and frames (tab), what a run
keeps (state), its cells, slots chart and stats (html)."""
