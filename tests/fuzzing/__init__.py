"""The fuzz harnesses: test support, not part of the installed package (issue 47). The suite
imports them as ``fuzzing`` (``tests/`` is on its path, `conftest.py`); the scripts of
``benchmarks/fuzz_*.py`` put ``tests/`` on theirs. They import `plexus`; nothing of `plexus`
imports them.

- `harness`: a case, its outcomes, running cases in child or forked processes;
- `inputs`: every input file kind and the API's graph inputs (the runner of those cases), from
  `samples` (valid inputs), `mutate` (generic damage), `filecases` and `storecases` (a kind's
  damage), `api` (the API's calls);
- `studies`: the study folders of plexus-sweep and plexus-report;
- `stores`: what earlier runs leave on disk (`storedamage`), found through `targets`.
"""
