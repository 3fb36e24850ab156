"""Build the API reference of Plexus (HTML, with pdoc) from the docstrings of its public modules.

    ./run python docs/api.py api-docs/

pdoc walks a package's submodules only where its ``__all__`` names them, and Plexus's packages
name their public functions and classes there, not their modules. So this lists the modules
itself: the three projects' packages (``plexus``, ``plexus_datasets``, ``plexus_partition``) and
every module below them, but private ones (``_name``), the test helpers
(``plexus.testing``), ``plexus-bench`` and the report writers (``plexus.bench``), the
scaling-study tools (``plexus.studies``) and the optional Triton kernels
(``plexus.engine.triton_masks``), and hands them to pdoc.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from pathlib import Path

# ... and the Triton kernels (imported only where Triton is installed; not a public API)
LEFT_OUT = ("plexus.testing", "plexus.bench", "plexus.studies", "plexus.engine.triton_masks")


#: the three projects' packages: the engine, the datasets project, the partitioner project
ROOTS = ("plexus", "plexus_datasets", "plexus_partition")


def public_modules() -> list[str]:
    """The three projects' packages and every public module below them, in a stable order."""
    names: set[str] = set()
    todo = [info.name for root in ROOTS
            for info in pkgutil.iter_modules(importlib.import_module(root).__path__, root + ".")]
    while todo:
        name = todo.pop()
        if name in names or any(p.startswith("_") for p in name.split(".")) \
                or any(name == x or name.startswith(x + ".") for x in LEFT_OUT):
            continue
        names.add(name)
        module = importlib.import_module(name)
        if hasattr(module, "__path__"):  # a package: its own modules
            todo += [info.name for info in pkgutil.iter_modules(module.__path__, name + ".")]
    return [*ROOTS, *sorted(names)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the HTML pages into")
    args = parser.parse_args(argv)
    import pdoc  # noqa: PLC0415 (in the test and docs extras)

    modules = public_modules()
    # pdoc also walks each listed package's __all__ submodules: those repeats are expected
    warnings.filterwarnings("ignore", message="The module specification .* adds a module named")
    # a listed package's walk would reach the left-out modules below it: exclude them there too
    pdoc.pdoc(*modules, *(f"!{name}" for name in LEFT_OUT), output_directory=args.out)
    print(f"wrote the reference of {len(modules)} modules to {args.out}/ "
          f"(open {args.out / 'plexus.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
