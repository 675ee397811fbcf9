"""Private-PGM (``mbi``) on noisy hierarchical marginals: runs in its own venv (benchmarks/.venvs/mbi).

    benchmarks/.venvs/mbi/bin/python benchmarks/anchors/pgm_consistency.py IN.npz OUT.npz ITERS

IN.npz (written by benchmarks/consistency_pgm.py): the attribute sizes (``attrs``: PUMA first,
then the tables' columns), per table its columns, per trial and (table, level) the noisy cells
and their noise standard deviation, and the 0/1 matrix from PUMAs to states. Each table's
measurements become three linear measurements of one clique (PUMA × its columns): at PUMA the
marginal itself, at STATE the marginal summed over each state's PUMAs, at the root the
columns' marginal. Mirror descent fits a graphical model over PUMA and every column (no
cross-product of the whole detail); its marginals on each table's clique are written to OUT.npz
(floats: Private-PGM does not round), with the seconds of each trial.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from mbi import Domain, LinearMeasurement  # noqa: E402
from mbi.estimation import MirrorDescent  # noqa: E402


@dataclasses.dataclass(frozen=True, eq=False)
class StateSum:
    """The clique (PUMA, columns…) summed over each state's PUMAs: ``matrix`` (states × PUMAs)."""

    matrix: np.ndarray

    def __call__(self, f):
        x = f.datavector(flatten=False)
        return jnp.tensordot(jnp.asarray(self.matrix), x, axes=1).reshape(-1)

    def op_norm_sq(self) -> float:
        return float(self.matrix.sum(1).max())  # ‖A‖² of a 0/1 matrix with one 1 per column

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def main() -> None:
    src, dst, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = np.load(src)
    meta = json.loads(str(data["meta"]))
    domain = Domain(list(meta["attrs"]), [int(n) for n in meta["sizes"]])
    state_sum = StateSum(np.asarray(data["states"], dtype=np.float64))
    out, seconds = {}, []
    for trial in range(meta["trials"]):
        measurements = []
        for name, cols in meta["tables"].items():
            clique = ("PUMA", *cols)
            for level, query, c in (("PUMA", None, clique), ("STATE", state_sum, clique), ("root", None, tuple(cols))):
                y = np.asarray(data[f"{trial}|{name}|{level}"], dtype=np.float64)
                sd = float(meta["stddev"][f"{name}|{level}"])
                kwargs = {} if query is None else {"query": query}
                measurements.append(LinearMeasurement(y, c, stddev=sd, **kwargs))
        start = time.perf_counter()
        model = MirrorDescent().estimate(domain, measurements, iters=iters)
        for name, cols in meta["tables"].items():
            out[f"{trial}|{name}"] = np.asarray(model.project(("PUMA", *cols)).datavector())
        seconds.append(time.perf_counter() - start)
    np.savez(dst, seconds=np.array(seconds), **out)


if __name__ == "__main__":
    main()
