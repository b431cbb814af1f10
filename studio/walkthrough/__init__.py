"""The Walkthrough tab, the classroom's: the training mask, the loss and a threshold decode forward by forward (tab),
verified decoding forward by forward (verified), what both share (walk)."""
