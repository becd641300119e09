"""Renderers: each reads a :class:`attntrace.Trace` and prints it; none computes attention."""
