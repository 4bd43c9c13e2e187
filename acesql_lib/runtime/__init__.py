"""The bottom floor: what any stage uses and no setting decides. Progress bars, phase timing, the
calibration workload, JSON readers, the launched process group's end, and the reuse keys that fingerprint
saved work. Imports nothing else of the kit.
"""
