"""lrdoctor: find, prove and repair LR-scheduler / gradient-accumulation step-accounting bugs.

The metadata path (``lrdoctor inspect``) must never import torch, pandas or
matplotlib: keep heavy imports inside the functions that need them.
"""

__version__ = "0.1.0"
