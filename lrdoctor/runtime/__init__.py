"""What runs inside the user's training loop: the live guard (:mod:`.guard`:
``StepGuard``, ``NormalizedStepper``, ``LoopWatch``), the HF Trainer and Lightning
callbacks that feed it (:mod:`.callbacks`), and the batch-log recorder
(:mod:`.record`) whose rows ``lrdoctor replay`` reads back (one schema:
:data:`lrdoctor.core.state.BATCH_LOG_COLUMNS`).

Nothing here imports torch at import time, and nothing here imports the offline
parts (formats, repair, replay): a training job pays only for what it uses.
"""
