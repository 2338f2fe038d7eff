"""The decay shapes warmup-stable-decay schedules share, as their frameworks compute them.

timm's ``WSDLRScheduler`` (``decay_fn``) and torchtitan's ``linear_warmup_stable_decay``
(``decay_type``) write the same three shapes operation for operation; here they are
written once, so the two families cannot drift apart. Not a family module: no
``lr_at`` (:mod:`lrdoctor.schedules` looks families up).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping


def _linear(frac: float) -> float:
    return 1.0 - frac


def _one_minus_sqrt(frac: float) -> float:
    return 1.0 - math.sqrt(frac)


def _cosine(frac: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * frac))


#: Shape name -> the share of the decay still ahead at ``frac`` (0..1) of it; timm
#: names the square root ``1-sqrt``, torchtitan ``sqrt``.
DECAY: Mapping[str, Callable[[float], float]] = {
    "linear": _linear, "1-sqrt": _one_minus_sqrt, "sqrt": _one_minus_sqrt, "cosine": _cosine}
