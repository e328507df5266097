"""Cloud providers behind one small interface (see `base.py`).

Import nothing heavy here: cloud SDKs load only inside their own module.
"""
