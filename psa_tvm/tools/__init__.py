"""Benchmark and tuning programs (``psa-tvm bench``, ``psa-tvm tune``, ``scripts/*.py``)."""
