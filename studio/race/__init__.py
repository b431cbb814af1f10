"""The Race tab: one prompt, three decoders racing (AR, MARS at τ, MARS verified): its layout and events (tab), the race
itself (loop), what a race keeps (state), its panes and stats (html), its charts (figures)."""
