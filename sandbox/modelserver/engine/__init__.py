"""Continuous-batching engine: a compute process runs the model ahead, a clock thread paces
the tokens out."""
