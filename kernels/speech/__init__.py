"""Whisper's kernels: decoder layers in one call, f16 attention, encoder element-wise ops, the screened output projection."""
