"""``python -m attntrace``."""

from attntrace.cli import main

main()
