"""Training: the MARS and AR-SFT trainers (config beside trainer, as in TRL), chat data, the MARS mask, the CLI."""
