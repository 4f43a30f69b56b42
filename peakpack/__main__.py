"""`python -m peakpack`: the same command line as the `peakpack` script."""

from peakpack.orchestrator.faces.cli.app import main

main()
