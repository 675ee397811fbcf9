"""Local differential privacy in release specs: kind: local tables, `dprelease randomize` on the
respondents' side (k-RR and the coin flip, with memoisation), estimates from the collected
answers with standard errors, and the ledger's per-respondent ε of every collection."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from fractions import Fraction

import numpy as np
import pytest

from dprelease.accounting import PureDP, Terms
from dprelease.accounting import ln_upper_bound
from dprelease.ledger import Ledger, resolve_location
from dprelease.mechanisms.local import coin_flip
from tests.conftest import assert_edit_refused
from tests.stats import empirical_epsilon, finite_chi_square_pvalue
from tests.test_run import run
from tests.ledgers import init_at, make_ledger

TRUTH = np.array([0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.03, 0.02, 0.0])
LETTERS = "abcdefghij"

SPEC = """\
release: {release}
dataset:
  name: survey-panel
  path: {data}
  lifetime_budget: {{epsilon: 1}}
privacy: {{definition: pure, unit: row}}
budget: {{epsilon: 1}}
columns:
  FAVOURITE: {{domain: [a, b, c, d, e, f, g, h, i, j]}}
  SMOKES: {{domain: ["yes", "no"]}}
tables:
  - name: favourite
    kind: local
    column: FAVOURITE
    protocol: k_rr
    epsilon_local: 1
    collection: {collection}
    memoised: {memoised}{memo_of}
  - name: smokers
    kind: local
    column: SMOKES
    protocol: coin_flip
    collection: {collection}
    memoised: {memoised}{memo_of}
"""


def write_spec(tmp_path, release="survey-wave-1", collection="wave-1", memoised="false", data="answers.csv",
               name="spec.yaml"):
    path = tmp_path / name
    memo_of = "\n    memo_of: wave-1" if memoised == "true" else ""
    path.write_text(SPEC.format(release=release, collection=collection, memoised=memoised, data=data, memo_of=memo_of))
    return path


def true_answers(path, n=100_000, seed=7):
    """Respondents' true answers (test data, not noise): a known distribution over 10 values and
    22% smokers."""
    data = np.random.default_rng(seed)
    favourite = data.choice(10, size=n, p=TRUTH)
    smokes = data.random(n) < 0.22
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["ID", "FAVOURITE", "SMOKES"])
        writer.writerows((f"r{i}", LETTERS[a], "yes" if b else "no") for i, (a, b) in enumerate(zip(favourite, smokes)))


def randomized_answers(cli, spec, ledger, source, target, memo=None):
    """`dprelease randomize` both tables of ``spec`` (favourite, then smokers) from the true
    answers in ``source`` into ``target``: answers the ledger registers (the second step keeps the
    first's registration of the column it copies). ``memo``: a prefix of the two memo files. The
    ledger at ``ledger`` is made on purpose first where there is none (randomize never makes one)."""
    if not Path(ledger).exists():
        make_ledger(ledger)
    step = target.with_name(target.stem + "-step.csv")
    results = []
    for table, src, dst in (("favourite", source, step), ("smokers", step, target)):
        memo_args = ["--id", "ID", "--memo", f"{memo}-{table}.json"] if memo else []
        results.append(cli("randomize", spec, table, "--input", src, "--output", dst, "--ledger", ledger, *memo_args))
        assert results[-1].code == 0, results[-1]
    return results


def read_csv(path):
    with path.open() as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------- the coin flip


def test_the_coin_flip_keeps_the_truth_with_probability_three_quarters():
    n = 200_000
    reports = coin_flip(np.ones(n, np.int64))
    # α = 1e-6, as the samplers' tests (tests/README.md); the control's χ² is ≈ 3,100 on 1 df
    assert finite_chi_square_pvalue(reports, np.array([0.25, 0.75])) > 1e-6
    assert finite_chi_square_pvalue(reports, np.array([0.2, 0.8])) < 1e-6  # control: truth kept 4/5


def test_the_coin_flip_is_ln3_private_and_a_biased_coin_is_caught():
    n = 400_000
    eps, se = empirical_epsilon(coin_flip(np.zeros(n, np.int64)) == 1, coin_flip(np.ones(n, np.int64)) == 1)
    assert abs(eps - math.log(3)) < 6 * se, (eps, se)  # 6 standard errors: ≈ 2e-9 by chance
    data = np.random.default_rng(1)  # a broken respondent-side tool: truth kept with probability 7/8

    def biased(values):
        return np.where(data.random(values.size) < 0.75, values, coin_flip(values))

    broken, se_b = empirical_epsilon(biased(np.zeros(n, np.int64)) == 1, biased(np.ones(n, np.int64)) == 1)
    assert broken > math.log(3) + 6 * se_b, (broken, se_b)


def test_ln3_is_recorded_as_a_rational_upper_bound():
    bound = ln_upper_bound(3)
    assert isinstance(bound, Fraction) and bound.denominator <= 10**12
    assert math.log(3) <= float(bound) < math.log(3) + 1e-11
    assert bound - Fraction(1, 10**11) < Fraction(str(math.log(3))) + Fraction(1, 10**15)


# ---------------------------------------------------------------- spec errors


@pytest.mark.parametrize("old,new,field,words", [
    ("    protocol: coin_flip\n", "    protocol: coin_flip\n    epsilon_local: 1\n", "tables[1].epsilon_local", "ln 3"),
    ("    epsilon_local: 1\n", "", "tables[0]", "epsilon_local"),
    ("  SMOKES: {domain: [\"yes\", \"no\"]}", "  SMOKES: {domain: [\"yes\", \"no\", \"maybe\"]}", "tables[1].protocol",
     "yes/no"),
    ("    column: SMOKES\n", "    column: SMOKER\n", "tables[1].column", "not a declared column"),
    ("  SMOKES: {domain: [\"yes\", \"no\"]}", "  SMOKES: {domain: [\"yes\", \"no\"], missing: unknown}",
     "tables[1].column", "missing"),
    ("    protocol: k_rr\n", "    protocol: rappor\n", "tables[0].protocol", ""),
    ("    memoised: false\n", "    memoised: false\n    epsilon: 1\n", "tables[0].epsilon", "unknown key"),
])
def test_bad_local_tables_are_refused_with_the_field(tmp_path, cli, old, new, field, words):
    assert_edit_refused(cli, write_spec(tmp_path), old, new, field, words)


# ---------------------------------------------------------------- randomize, estimate, record


def test_randomize_estimate_and_record_a_survey(tmp_path, release_env, cli):
    """10^5 respondents: `dprelease randomize` on their side, a release estimates from the
    collected answers (both estimators within 2 SE of the truth for most categories), and the
    ledger records each respondent's ε: 1 + ln 3 (rounded up) for the first wave."""
    true_answers(tmp_path / "true.csv")
    spec = write_spec(tmp_path)
    ledger = make_ledger(tmp_path / "ledger.sqlite")
    step = cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "step.csv",
               "--id", "ID", "--memo", tmp_path / "memo.json", "--ledger", ledger)
    assert step.code == 0, step
    assert (os.stat(tmp_path / "memo.json").st_mode & 0o777) == 0o600  # respondent-side state, owner-only
    done = cli("randomize", spec, "smokers", "--input", tmp_path / "step.csv", "--output", tmp_path / "answers.csv",
               "--id", "ID", "--memo", tmp_path / "memo-smk.json", "--ledger", ledger)
    assert done.code == 0, done
    truth_rows, answers = read_csv(tmp_path / "true.csv"), read_csv(tmp_path / "answers.csv")
    kept = np.mean([t["FAVOURITE"] == a["FAVOURITE"] for t, a in zip(truth_rows, answers)])
    assert abs(kept - math.e / (math.e + 9)) < 0.005  # k-RR keeps the truth with e^ε/(e^ε + k − 1)
    assert all(t["ID"] == a["ID"] for t, a in zip(truth_rows, answers))

    proc = run(spec, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert proc.returncode == 0, proc.stderr
    release = tmp_path / "out" / "survey-wave-1"
    favourite = read_csv(release / "tables" / "favourite.csv")
    assert [r["FAVOURITE"] for r in favourite] == list(LETTERS)
    for share, se in (("share", "se"), ("share_mi", "se_mi")):
        estimate = np.array([float(r[share]) for r in favourite])
        errors = np.array([float(r[se]) for r in favourite])
        assert abs(estimate.sum() - 1) < 1e-9 and (estimate >= 0).all()
        assert (np.abs(estimate - TRUTH) <= 2 * errors).sum() >= 8, (share, estimate, errors)
    smokers = {r["SMOKES"]: float(r["share"]) for r in read_csv(release / "tables" / "smokers.csv")}
    assert abs(smokers["yes"] - 0.22) < 0.012
    manifest = json.loads((release / "manifest.json").read_text())
    local = {t["name"]: t for t in manifest["local_tables"]}
    assert local["smokers"]["epsilon_local"] == "ln 3" and local["smokers"]["keep_probability"] == 0.75
    assert Fraction(local["smokers"]["epsilon_local_bound"]) == ln_upper_bound(3)
    assert Fraction(manifest["local_epsilon_per_respondent"]["after"]) == 1 + ln_upper_bound(3)
    assert manifest["budget"]["total"] == {"epsilon": "0"}  # no central budget

    # wave 2 is memoised: every respondent repeats their wave-1 randomized answer, even the 10% whose
    # true answer changed since (a repeat per true value would reveal who changed: no ε at all), so
    # wave 2 costs nothing new
    truth2 = read_csv(tmp_path / "true.csv")
    for i, row in enumerate(truth2):
        if i % 10 == 0:
            row["FAVOURITE"] = LETTERS[(LETTERS.index(row["FAVOURITE"]) + 1) % 10]
            row["SMOKES"] = "no" if row["SMOKES"] == "yes" else "yes"
    with (tmp_path / "true2.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["ID", "FAVOURITE", "SMOKES"])
        writer.writeheader()
        writer.writerows(truth2)
    spec2 = write_spec(tmp_path, release="survey-wave-2", collection="wave-2", memoised="true", data="answers2.csv",
                       name="spec2.yaml")
    fav = cli("randomize", spec2, "favourite", "--input", tmp_path / "true2.csv", "--output", tmp_path / "step2.csv",
              "--id", "ID", "--memo", tmp_path / "memo.json", "--ledger", ledger)
    assert fav.code == 0 and "100,000 reused" in fav.stdout, fav
    smk = cli("randomize", spec2, "smokers", "--input", tmp_path / "step2.csv", "--output", tmp_path / "answers2.csv",
              "--id", "ID", "--memo", tmp_path / "memo-smk.json", "--ledger", ledger)
    assert smk.code == 0 and "100,000 reused" in smk.stdout, smk
    wave1, wave2 = read_csv(tmp_path / "answers.csv"), read_csv(tmp_path / "answers2.csv")
    assert [(r["FAVOURITE"], r["SMOKES"]) for r in wave1] == [(r["FAVOURITE"], r["SMOKES"]) for r in wave2]
    planned = cli("plan", spec2, "--ledger", ledger)
    assert planned.code == 0 and "0 (memoised)" in planned.stdout, planned
    assert run(spec2, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env).returncode == 0
    opened = Ledger.open(resolve_location(str(ledger)))
    state = opened.state("survey-panel")
    opened.close()
    charged = {(r.collection, r.question): r.charged for r in state.local}
    ln3 = ln_upper_bound(3)
    assert charged == {("wave-1", "FAVOURITE"): PureDP(1), ("wave-1", "SMOKES"): PureDP(ln3),
                       ("wave-2", "FAVOURITE"): PureDP(0), ("wave-2", "SMOKES"): PureDP(0)}
    assert state.local_epsilon == PureDP(1 + ln3) and state.spent == PureDP(0)
    assert state.terms == Terms("pure", change=True)  # the number of answers is public: change one record
    shown = cli("ledger", "--ledger", ledger, "--json")
    listed = json.loads(shown.stdout)["datasets"][0]
    assert Fraction(listed["local_epsilon_per_respondent"]) == 1 + ln3

    # estimating wave 1 again (a new release from the same answers) records nothing new ...
    spec3 = write_spec(tmp_path, release="survey-wave-1-revised", name="spec3.yaml")
    assert run(spec3, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env).returncode == 0
    opened = Ledger.open(resolve_location(str(ledger)))
    assert opened.state("survey-panel").local_epsilon == PureDP(1 + ln3)
    opened.close()
    # ... but new answers under wave 1's name are refused, not recorded as free: unregistered ...
    before = (tmp_path / "answers.csv").read_text()
    (tmp_path / "answers.csv").write_text(before.replace('"r0"', '"r0x"', 1))
    assert (tmp_path / "answers.csv").read_text() != before
    spec4 = write_spec(tmp_path, release="survey-wave-1-again", name="spec4.yaml")
    refused = run(spec4, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert refused.returncode == 2 and "match no registered answers" in refused.stderr, refused.stderr
    assert not (tmp_path / "out" / "survey-wave-1-again").exists()
    # ... and they cannot be registered for wave 1 either, with a statement or not: wave 1 was
    # estimated from other answers (refused at registration, before any run)
    for table in ("favourite", "smokers"):
        registered = cli("ledger", "register-answers", spec4, table, "--answers", tmp_path / "answers.csv",
                         "--statement", "edited by hand", "--ledger", ledger)
        assert registered.code == 2 and "was already estimated from other answers" in registered.stderr, registered
    refused = run(spec4, "--output-dir", tmp_path / "out", "--ledger", ledger, env=release_env)
    assert refused.returncode == 2 and "match no registered answers" in refused.stderr, refused.stderr
    assert not (tmp_path / "out" / "survey-wave-1-again").exists()


def test_a_memoised_collection_needs_its_first_one(tmp_path, cli):
    true_answers(tmp_path / "answers.csv", n=100)
    spec = write_spec(tmp_path, memoised="true", collection="wave-2", data="answers.csv")
    refused = cli("plan", spec, "--ledger", make_ledger(tmp_path / "ledger.sqlite"))
    assert refused.code == 2 and "'wave-1' is not a recorded, non-memoised collection" in refused.stderr, refused
    text = spec.read_text()
    spec.write_text(text.replace("    memo_of: wave-1\n", "", 1))
    result = cli("validate", spec)
    assert result.code == 2 and "add memo_of" in result.stderr, result


def test_ids_are_kept_as_written(tmp_path, cli):
    """"001" and "1" are two respondents, and the output keeps "001": a memo keyed on a parsed
    id would give one of them a second, uncharged draw."""
    (tmp_path / "true.csv").write_text("ID,FAVOURITE,SMOKES\n001,a,yes\n1,b,no\n")
    spec = write_spec(tmp_path)
    assert cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "o.csv",
               "--id", "ID", "--memo", tmp_path / "m.json").code == 0
    assert [r["ID"] for r in read_csv(tmp_path / "o.csv")] == ["001", "1"]
    assert set(json.loads((tmp_path / "m.json").read_text())["answers"]) == {"001", "1"}


def test_answers_recorded_before_fingerprints_are_treated_as_unknown(tmp_path):
    """A pre-release schema-2 ledger held local collections without the answers' fingerprint: it is
    migrated, and estimating such a collection again is refused (its answers are unknown) rather
    than recorded as free."""
    import sqlite3

    from dprelease.errors import LedgerError
    from dprelease.ledger import LocalCollection

    from dprelease.ledger import RANDOMIZED, AnswerSet

    path = tmp_path / "l.sqlite"
    ledger = init_at(resolve_location(str(path)))
    ledger.set_budget("d", PureDP(1), reason="test", terms=Terms("pure", change=True))
    answers = ledger.fingerprint("sha256:aaa")
    asked = LocalCollection("wave-1", "Q", "k_rr:1/k=3", Fraction(1), answers=answers)
    ledger.register_answers((AnswerSet("d", "wave-1", "Q", "k_rr:1/k=3", Fraction(1), answers, RANDOMIZED),))
    ledger.reserve(dataset="d", release="a", charges=[], spec_fingerprint="x", lifetime_from_spec=None,
                   terms=Terms("pure", change=True), local=(asked,))
    ledger.close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE local_collections DROP COLUMN answers")
    con.execute("UPDATE dprelease_meta SET value = '2' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    ledger = Ledger.open(resolve_location(str(path)))
    assert ledger.state("d").local_epsilon == PureDP(1)
    with pytest.raises(LedgerError, match="other answers"):
        ledger.reserve(dataset="d", release="b", charges=[], spec_fingerprint="x", lifetime_from_spec=None,
                       terms=Terms("pure", change=True), local=(asked,))
    ledger.close()


def test_randomize_refuses_bad_input(tmp_path, cli):
    """Each refusal writes nothing: an answer outside the domain, --memo without --id, an unknown
    table, an existing output, a missing folder, a memo of another question, and a memoised
    table randomized without its memo."""
    true_answers(tmp_path / "true.csv", n=50)
    spec = write_spec(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("ID,FAVOURITE,SMOKES\nr1,a,yes\nr2,z,no\n")
    result = cli("randomize", spec, "favourite", "--input", bad, "--output", tmp_path / "o.csv")
    assert result.code == 2 and "not in the declared domain" in result.stderr and not (tmp_path / "o.csv").exists()
    result = cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "o.csv",
                 "--memo", tmp_path / "m.json")
    assert result.code == 2 and "--id" in result.stderr
    result = cli("randomize", spec, "nosuch", "--input", tmp_path / "true.csv", "--output", tmp_path / "o.csv")
    assert result.code == 2 and "no local table 'nosuch'" in result.stderr
    (tmp_path / "o.csv").write_text("keep me")
    result = cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "o.csv")
    assert result.code == 2 and (tmp_path / "o.csv").read_text() == "keep me"
    assert cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "p.csv",
               "--id", "ID", "--memo", tmp_path / "m.json").code == 0
    result = cli("randomize", spec, "smokers", "--input", tmp_path / "true.csv", "--output", tmp_path / "q.csv",
                 "--id", "ID", "--memo", tmp_path / "m.json")  # a memo of another question
    assert result.code == 2 and "keeps its question and protocol" in result.stderr, result
    first_only = write_spec(tmp_path, collection="wave-9", name="other.yaml")  # not memoised, an existing memo
    result = cli("randomize", first_only, "favourite", "--input", tmp_path / "true.csv", "--output",
                 tmp_path / "t.csv", "--id", "ID", "--memo", tmp_path / "m.json")
    assert result.code == 2 and "fresh collection" in result.stderr and not (tmp_path / "t.csv").exists(), result
    memoised_spec = write_spec(tmp_path, memoised="true", collection="wave-2", name="memo2.yaml")
    result = cli("randomize", memoised_spec, "favourite", "--input", tmp_path / "true.csv", "--output",
                 tmp_path / "u.csv", "--id", "ID", "--memo", tmp_path / "none.json")
    assert result.code == 2 and "does not exist" in result.stderr and not (tmp_path / "u.csv").exists(), result
    more = tmp_path / "more.csv"
    more.write_text((tmp_path / "true.csv").read_text() + "newbie,a,no\n")
    result = cli("randomize", memoised_spec, "favourite", "--input", more, "--output", tmp_path / "v.csv",
                 "--id", "ID", "--memo", tmp_path / "m.json")
    assert result.code == 2 and "collection of their own" in result.stderr and not (tmp_path / "v.csv").exists()
    pilot = write_spec(tmp_path, collection="pilot", name="pilot.yaml")  # a memo made by another collection
    assert cli("randomize", pilot, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "w.csv",
               "--id", "ID", "--memo", tmp_path / "pilot.json").code == 0
    result = cli("randomize", memoised_spec, "favourite", "--input", tmp_path / "true.csv", "--output",
                 tmp_path / "x.csv", "--id", "ID", "--memo", tmp_path / "pilot.json")
    assert result.code == 2 and "not of 'wave-1'" in result.stderr and not (tmp_path / "x.csv").exists(), result
    blank = tmp_path / "blank.csv"
    blank.write_text("ID,FAVOURITE,SMOKES\nr1,a,yes\n,b,no\n")
    result = cli("randomize", spec, "favourite", "--input", blank, "--output", tmp_path / "y.csv", "--id", "ID",
                 "--memo", tmp_path / "blank.json")
    assert result.code == 2 and "empty respondent id" in result.stderr and not (tmp_path / "y.csv").exists()
    marked = write_spec(tmp_path, name="marked.yaml")  # "NA" reads as missing wherever the answers are read
    marked.write_text(marked.read_text().replace("  name: survey-panel\n", '  name: survey-panel\n  na_values: ["NA"]\n'))
    named = tmp_path / "named.csv"
    named.write_text("ID,FAVOURITE,SMOKES\nr1,a,yes\nNA,b,no\n")
    result = cli("randomize", marked, "favourite", "--input", named, "--output", tmp_path / "z.csv", "--id", "ID",
                 "--memo", tmp_path / "named.json")
    assert result.code == 2 and f"{named}: column ID has respondent id 'NA' on data row 2, one of dataset.na_values" \
        in result.stderr and not (tmp_path / "z.csv").exists() and not (tmp_path / "named.json").exists(), result
    for where in (["--output", tmp_path / "nowhere" / "o.csv"],
                  ["--output", tmp_path / "r.csv", "--id", "ID", "--memo", tmp_path / "nowhere" / "m.json"]):
        result = cli("randomize", spec, "favourite", "--input", tmp_path / "true.csv", *where)
        assert result.code == 2 and "does not exist" in result.stderr and not (tmp_path / "r.csv").exists(), result
    memoised = write_spec(tmp_path, memoised="true", collection="wave-2", name="memoised.yaml")
    result = cli("randomize", memoised, "favourite", "--input", tmp_path / "true.csv", "--output", tmp_path / "s.csv")
    assert result.code == 2 and "--memo" in result.stderr and not (tmp_path / "s.csv").exists(), result


def test_a_huge_local_epsilon_is_estimated_not_crashed(tmp_path, release_env, cli):
    """ε_local = 1000: the truth is kept with probability 1 − 9e^−1000 (no overflow), the run
    publishes, and the estimate is the answers' shares."""
    true_answers(tmp_path / "true.csv", n=2000)
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace("epsilon_local: 1", "epsilon_local: 1000"))
    randomized_answers(cli, spec, tmp_path / "l.sqlite", tmp_path / "true.csv", tmp_path / "answers.csv")
    proc = run(spec, "--output-dir", tmp_path / "out", "--ledger", tmp_path / "l.sqlite", env=release_env)
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(tmp_path / "out" / "survey-wave-1" / "tables" / "favourite.csv")
    answers = np.array([int(r["answers"]) for r in rows])
    assert np.allclose([float(r["share"]) for r in rows], answers / answers.sum(), atol=1e-6)


# ---------------------------------------------------------------- the estimators' own contracts


def _log_likelihood(pi, counts, epsilon):
    k = pi.size
    p = math.exp(epsilon) / (math.exp(epsilon) + k - 1)
    q = (1 - p) / (k - 1)
    return float((counts * np.log(q + (p - q) * pi)).sum())


def test_ibu_is_the_maximum_likelihood_estimate():
    """On a dense and a sparse truth: IBU's likelihood is at least that of the projected
    matrix-inversion estimate and of small moves along the simplex (a local, hence global, maximum
    of the concave likelihood); where the truth has zeros it is strictly higher, so an IBU that
    merely returned matrix inversion would be caught."""
    from dprelease.mechanisms.local import iterative_bayesian_update, matrix_inversion, randomize

    data = np.random.default_rng(11)  # true answers and perturbation directions: test data
    sparse = np.array([0.4, 0.3, 0.15, 0.1, 0.05, 0, 0, 0, 0, 0])
    gains = []
    for truth, n in ((TRUTH, 100_000), (sparse, 10_000)):
        for _ in range(5):
            counts = np.bincount(randomize(data.choice(10, size=n, p=truth), 10, Fraction(1)), minlength=10)
            ibu = iterative_bayesian_update(counts, 1.0).proportions
            best = _log_likelihood(ibu, counts, 1.0)
            gains.append(best - _log_likelihood(matrix_inversion(counts, 1.0).proportions, counts, 1.0))
            assert gains[-1] >= -1e-9 * n  # EM stops a hair short of the maximum: 1e-9 per respondent
            for _ in range(20):
                step = data.normal(size=10) * 1e-3
                step -= step.mean()
                moved = ibu + step
                if (moved >= 0).all():
                    assert _log_likelihood(moved, counts, 1.0) <= best + 1e-6
    assert max(gains) > 1e-3, gains


@pytest.mark.slow
def test_standard_errors_match_the_spread_across_replicates():
    """40 replicates of 10^4 respondents: per category, the spread of each estimator across
    replicates is what its reported standard error says (ratio within [0.7, 1.4]); standard errors
    ten times too large or too small would be caught."""
    from dprelease.mechanisms.local import iterative_bayesian_update, matrix_inversion, randomize

    truth = np.array([0.25, 0.2, 0.15, 0.1, 0.08, 0.07, 0.06, 0.04, 0.03, 0.02])  # inside the simplex
    data = np.random.default_rng(3)
    estimates = {"mi": [], "ibu": []}
    errors = {"mi": [], "ibu": []}
    for _ in range(40):
        counts = np.bincount(randomize(data.choice(10, size=10_000, p=truth), 10, Fraction(1)), minlength=10)
        for name, estimate in (("mi", matrix_inversion(counts, 1.0)), ("ibu", iterative_bayesian_update(counts, 1.0))):
            estimates[name].append(estimate.proportions)
            errors[name].append(estimate.standard_errors)
    for name in estimates:
        spread = np.std(estimates[name], axis=0, ddof=1)
        reported = np.mean(errors[name], axis=0)
        ratio = spread / reported
        assert ((0.7 <= ratio) & (ratio <= 1.4)).sum() >= 9, (name, ratio)  # a χ² spread with 39 d.f.
        assert not ((0.7 <= spread / (10 * reported)) & (spread / (10 * reported) <= 1.4)).any()


def test_local_tables_make_the_release_bounded_and_count_every_answer(tmp_path, cli):
    """A local table publishes how many answers were collected, so the release (and its dataset)
    is planned under change one record: a central table in the same spec gets sensitivity 2.
    Answers are counted in their own domain, whatever the other columns hold (a row dropped for
    another column's out-of-domain value still counts its answer: the count must not depend on
    private columns). A person unit is refused."""
    from dprelease.data import encode
    from dprelease.plan import plan_release
    from dprelease.spec import load_spec

    (tmp_path / "answers.csv").write_text("ID,FAVOURITE,SMOKES,AGEP\nr1,a,yes,30\nr2,b,no,130\nr3,a,no,40\n")
    dropping = write_spec(tmp_path, name="drop.yaml")
    dropping.write_text(dropping.read_text().replace('SMOKES: {domain: ["yes", "no"]}',
                                                     'SMOKES: {domain: ["yes", "no"], on_out_of_domain: drop}'))
    result = cli("validate", dropping)
    assert result.code == 2 and "on_out_of_domain: drop" in result.stderr, result
    spec_path = write_spec(tmp_path)
    spec_path.write_text(spec_path.read_text().replace(
        '  SMOKES: {domain: ["yes", "no"]}', '  SMOKES: {domain: ["yes", "no"]}\n'
        '  AGEP: {range: [0, 99], on_out_of_domain: drop}') + "  - {name: by_age, group_by: [AGEP], epsilon: 1}\n")
    spec = load_spec(spec_path)
    plan = plan_release(spec, None)
    assert plan.tables[0].sensitivity == 2 and plan.terms == Terms("pure", change=True)
    data = encode(spec)
    assert data.rows == 2  # the central tables lose the row with AGEP 130 ...
    assert list(data.local_counts["favourite"][:2]) == [2, 1]  # ... the local table keeps its answer
    person = write_spec(tmp_path, name="person.yaml")
    person.write_text(person.read_text().replace("unit: row", "unit: {id: ID, max_rows: 2}"))
    result = cli("validate", person)
    assert result.code == 2 and "privacy.unit" in result.stderr and "unit: row" in result.stderr, result
