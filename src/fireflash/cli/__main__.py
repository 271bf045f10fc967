"""``python -m fireflash.cli ...``: the same commands as the ``fireflash`` script."""

from fireflash.cli import main

main()
