"""`python -m service.cli`: the `temper` command."""

from service.cli import main

main()
