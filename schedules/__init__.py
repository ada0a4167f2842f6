"""Tuned schedule tables (data): ``<arch>.json``, written by ``scripts/tune.py``."""
