"""Replay's figures now live in :mod:`lrdoctor.render.plots`; this keeps the
documented ``lrdoctor.replay.plots.plot`` import path working."""

from lrdoctor.render.plots import intended_lr
from lrdoctor.render.plots import plot_replay as plot

__all__ = ["intended_lr", "plot"]
