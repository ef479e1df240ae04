"""Runs over several processes: torchrun ranks and their aggregation, xdist workers and their
merge, shards across runners.
"""
