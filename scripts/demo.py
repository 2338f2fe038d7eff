"""The README demo: diagnose and repair the bundled sample checkpoints."""
