"""The user's own attention code, run and recorded: what :func:`attntrace.capture` and
``attntrace trace`` do. Read in this order: :mod:`~attntrace.capturing.session` (the public
context manager), :mod:`~attntrace.capturing.runner` (running a file or a module), the hooks
(:mod:`~attntrace.capturing.torch_hooks`, :mod:`~attntrace.capturing.numpy_hooks`) writing
:mod:`~attntrace.capturing.events` into :mod:`~attntrace.capturing.record`, then the passes over
the recorded graph: :mod:`~attntrace.capturing.analyse` (:mod:`~attntrace.capturing.axes`,
:mod:`~attntrace.capturing.roles`) and :mod:`~attntrace.capturing.explain` (why a shape failed).
Nothing here imports :mod:`attntrace.diffing`.
"""
