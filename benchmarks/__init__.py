"""Benchmark programs; what they write goes to a folder of `results/`: the folder of the
paper whose table it fills (`results/spen/`, `results/e2e/`, `results/infnet/`,
`results/implicit/`, `results/seal/`, shown on that paper's page of the reproduction
report), or one of its own (`results/suite/`, `results/scaling/`, `results/faults/`, ...;
docs/results.md lists them)."""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO_ROOT, "results")
