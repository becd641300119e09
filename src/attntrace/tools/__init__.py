"""What is built on traces: shape checks for CI (:mod:`~attntrace.tools.check`), sweeps over sizes
(:mod:`~attntrace.tools.sweep`), verification against PyTorch (:mod:`~attntrace.tools.verify`,
:mod:`~attntrace.tools.reference`) and the study notes' worked example
(:mod:`~attntrace.tools.demo`). Each returns data; :mod:`attntrace.render` draws it.
"""
