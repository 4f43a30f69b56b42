"""`python3 guard.pyz COMMAND`: the archive's entry point."""

import sys

from peakpack.qos.guard.commands import main

sys.exit(main(sys.argv[1:]))
