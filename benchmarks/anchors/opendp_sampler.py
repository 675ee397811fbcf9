"""OpenDP's vector discrete Laplace: exact samples per second (run in benchmarks/.venvs/opendp).

make_laplace on a vector of integers (OpenDP's exact discrete Laplace for integer data) at
the given scale, invoked on a vector of zeros; median of --repeats. Prints one JSON line.

    benchmarks/.venvs/opendp/bin/python benchmarks/anchors/opendp_sampler.py --n 1000000 --scale 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import opendp.prelude as dp

dp.enable_features("contrib")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    laplace = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=args.scale)
    zeros = [0] * args.n
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = laplace(zeros)
        times.append(time.perf_counter() - start)
        assert len(out) == args.n
    print(json.dumps({"anchor": "opendp-vector-discrete-laplace", "n": args.n, "scale": args.scale,
                      "seconds": statistics.median(times), "per_second": args.n / statistics.median(times)}))


if __name__ == "__main__":
    main()
