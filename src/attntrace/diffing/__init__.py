"""The user's attention beside the reference: what :func:`attntrace.diff` and ``attntrace diff``
do. Read in this order: :mod:`~attntrace.diffing.diff_report` (the public function and its
report), :mod:`~attntrace.diffing.target` (what the command runs), :mod:`~attntrace.diffing.layer`
and :mod:`~attntrace.diffing.user_side` (the user's module and its steps, through
:mod:`attntrace.capturing`), :mod:`~attntrace.diffing.match` and :mod:`~attntrace.diffing.align`
(which tensor holds which reference step), :mod:`~attntrace.diffing.diagnose` with the catalogue
:mod:`~attntrace.diffing.bugs` (the bug that explains the first divergence).
"""
