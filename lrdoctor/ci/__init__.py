"""The CI gate (``lrdoctor check``, and the targets ``lrdoctor report`` reads from the
config): :mod:`.config` reads and validates ``[tool.lrdoctor]`` (pydantic), and
:mod:`.check` runs every target through inspect/replay, applies thresholds and
ignores, and gives one report per checked thing. Printing is :mod:`lrdoctor.render`'s.
"""
