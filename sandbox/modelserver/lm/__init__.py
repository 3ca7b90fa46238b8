"""A tiny deterministic byte-level language model in numpy, at fp32 or fp16."""
