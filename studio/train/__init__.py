"""The Train tab: watch MARS learn: its layout (tab), the live training, its broadcast to every visitor, the replay and
the race of what it trained (loop), what it keeps (state), its charts (figures), the command that records a training
for Replay (record)."""
