"""``plexus-bench``: measurements for the performance model.

Subcommands:
  calibrate  measure SpMM/GEMM rates and gloo collective α/β; write a JSON file that
             ``plexus-model --calibration FILE`` reads.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line, ``plexus-bench: error: ...``, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"plexus-bench: error: {message}\n")


def _build_parser() -> _Parser:
    p = _Parser(prog="plexus-bench", description="Benchmarks and calibration for Plexus.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    cal = sub.add_parser("calibrate", help="measure this machine for plexus-model",
                         description="Measure SpMM and GEMM rates (torch, CPU) and the latency "
                                     "(alpha) and per-byte time (beta) of gloo collectives on a "
                                     "local world; write them as JSON for plexus-model.")
    cal.add_argument("--out", required=True, metavar="FILE", help="calibration JSON to write")
    cal.add_argument("--world-size", type=int, default=2, metavar="P",
                     help="local gloo ranks for the collective timings (default 2; 1 skips them)")
    cal.add_argument("--threads", type=int, default=1, metavar="T",
                     help="torch threads for the compute timings (default 1, as one rank uses)")
    cal.add_argument("--quick", action="store_true",
                     help="small problems, few repetitions: seconds instead of tens of seconds")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``plexus-bench``. Exit 2 on bad input, 1 if a measurement fails."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("choose a command: calibrate")
    if args.command == "calibrate":
        from plexus.calibrate import calibrate, write_calibration

        if args.world_size < 1:
            parser.error(f"--world-size must be >= 1, got {args.world_size}")
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        start = time.perf_counter()
        try:
            doc = calibrate(args.world_size, args.threads, args.quick,
                            log=lambda m: print(m, file=sys.stderr, flush=True))
            path = write_calibration(doc, args.out)
        except OSError as e:
            print(f"plexus-bench: error: cannot write {args.out}: {e.strerror or e}",
                  file=sys.stderr)
            return 2
        except RuntimeError as e:
            print(f"plexus-bench: error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        print(f"SpMM {doc['spmm_flops']:.3g} flop/s, GEMM {doc['gemm_flops']:.3g} flop/s", end="")
        if "alpha" in doc:
            print(f", alpha {doc['alpha'] * 1e6:.1f} us, beta {1 / doc['beta'] / 1e9:.2f} GB/s",
                  end="")
        print(f"\nwrote {path} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
