"""Measure one step on one device: the timed-rounds loop, memory, statistics, NVML telemetry, energy,
throttling, device health, the machine fingerprint, devices and the process topology.
"""
