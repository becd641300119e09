"""One module per command (``cmd_<name>``), each registering itself on the app of
:mod:`attntrace.cli.typer_app` when :mod:`attntrace.cli.registry` imports it for the command
being run. A command's body only
wires options -> config -> trace -> renderer; the work lives in the stages below the CLI.
"""
