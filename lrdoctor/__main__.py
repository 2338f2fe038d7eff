"""``python -m lrdoctor``: the same CLI as the ``lrdoctor`` script, for envs without it on PATH."""

from lrdoctor.cli import main

main()
