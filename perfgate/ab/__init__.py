"""Same-job A/B: base and head measured in one job (alternating processes, or interleaved in one
process), their verdicts, the gate-quality A/B and `perfgate bisect`'s judgement of one commit.
"""
