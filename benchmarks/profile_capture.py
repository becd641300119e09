"""Where the time of a captured torch forward goes (cProfile, the capture's functions first).

python benchmarks/profile_capture.py
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_capture

plain, kept, shapes = bench_capture.torch_module()
for fn in (plain, shapes, kept):
    fn()
profile = cProfile.Profile()
profile.enable()
for _ in range(20):
    shapes()
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(25)
