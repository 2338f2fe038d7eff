"""Write the checked-in PyTorch-Ignite 0.5.5 runs (tests/helpers/ignite_runs.py) here.

PyTorch-Ignite: a framework neither the corpus nor the layout registry names. Generated
once (importing Ignite costs seconds, too slow for every test run):
``PYTHONPATH=. python tests/data/ignite_0_5_5/make.py`` with ``pytorch-ignite==0.5.5``
(the [test] extra) and torch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers import ignite_runs

if __name__ == "__main__":
    import sys

    here = Path(__file__).resolve().parent
    for scenario in sys.argv[1:] or ignite_runs.SCENARIOS:  # or only the ones named
        shutil.rmtree(here / scenario, ignore_errors=True)
        ignite_runs.write(here / scenario, scenario)
