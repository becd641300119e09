# The study notes' scripts run at import; `attntrace trace` runs them (tests/test_trace_cli.py).
collect_ignore_glob = ["seed_*.py"]
