"""The gate's measured quality: the false-alarm and detection experiment, its injected slowdowns,
and the rates with their confidence intervals.
"""
