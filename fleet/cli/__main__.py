"""`python -m fleet.cli ...`, as the tests, the demo and `fleet up` run it."""

import sys

from fleet.cli.subcommands import main

sys.exit(main())
