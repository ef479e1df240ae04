"""What is benchmarked: the model registry and workloads, step kinds, variants and their conversions,
tier selection, the runner that builds and measures one case, accuracy and FLOPs.
"""
