"""launcher: multi-cloud GPU provisioning and job launcher.

Keep this module import-free: `launcher --help` must start fast.
"""

__version__ = "0.1.0"
