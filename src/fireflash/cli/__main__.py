"""``python -m fireflash.cli ...``: the same commands as the ``fireflash`` script."""

from fireflash.cli.main import main

main()
