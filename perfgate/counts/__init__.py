"""Counting work instead of timing it: instructions under callgrind (`instructions`), aten op calls
and CUDA kernel launches per step (`op_counts`), and what changed between two counts
(`attribution`). docs/instructions.md says what counts see and what they do not."""
