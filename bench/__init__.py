"""Side-by-side benchmarks of liftbridge_sync against go-liftbridge and gufo-liftbridge.

Run ``python -m bench --help`` from the repository root. Nothing runs at import time.
"""
