"""EvidenceItem as read: every number a checkpoint and the configs beside it hold about
progress, a horizon or an LR, as :class:`~lrdoctor.core.evidence.EvidenceItem` with its
unit and field (:mod:`.collect`, from what the layouts loaded: :mod:`lrdoctor.read.bytes.seen`), attached to
the state after a layout read it (:mod:`.attach`). The hypotheses over them are rules
(:mod:`lrdoctor.rules.hypotheses`)."""
