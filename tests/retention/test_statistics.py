"""Statistics: known values, cross-checks against scipy, the pinned Mulberry32 stream."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cycgraph_memory.errors import InvalidInputError
from cycgraph_memory.statistics import (
    SampleSummary,
    benjamini_hochberg,
    gaussian,
    mixture_p_value,
    mulberry32,
    normal_quantile,
    pooled_variance,
    regularized_incomplete_beta,
    required_trials,
    student_t_cdf,
    subtract_summary,
    summarize,
    welch_lift,
)

scipy_stats = pytest.importorskip("scipy.stats")


def test_mulberry32_matches_the_reference_stream() -> None:
    # First outputs of the standard JavaScript one-liner (computed with node) for these seeds.
    expected = {
        1: [0.6270739405881613, 0.002735721180215478, 0.5274470399599522,
            0.9810509674716741, 0.9683778982143849],
        42: [0.6011037519201636, 0.44829055899754167, 0.8524657934904099,
             0.6697340414393693, 0.17481389874592423],
        0: [0.26642920868471265, 0.0003297457005828619, 0.2232720274478197,
            0.1462021479383111, 0.46732782293111086],
        4294967295: [0.8964226141106337, 0.189478256739676, 0.7156526781618595,
                     0.9440599093213677, 0.8452364315744489],
    }
    for seed, values in expected.items():
        rng = mulberry32(seed)
        assert [rng() for _ in values] == values
    same = mulberry32(2**32 + 42)  # seeds are taken modulo 2**32
    assert same() == expected[42][0]


def test_mulberry32_stays_in_unit_interval_and_rejects_non_int_seeds() -> None:
    rng = mulberry32(7)
    values = [rng() for _ in range(10_000)]
    assert all(0.0 <= v < 1.0 for v in values)
    assert abs(sum(values) / len(values) - 0.5) < 0.02
    with pytest.raises(InvalidInputError):
        mulberry32(1.5)  # type: ignore[arg-type]


def test_gaussian_is_box_muller_and_standard_normal() -> None:
    rng = mulberry32(1)
    u, v = rng(), rng()
    expected = math.sqrt(-2.0 * math.log(1.0 - u)) * math.cos(2.0 * math.pi * v)
    assert gaussian(mulberry32(1)) == expected
    rng = mulberry32(123)
    xs = [gaussian(rng) for _ in range(20_000)]
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    assert abs(mean) < 0.03 and abs(var - 1.0) < 0.05
    assert scipy_stats.kstest(xs, "norm").pvalue > 0.001


def test_student_t_cdf_known_values() -> None:
    assert student_t_cdf(0.0, 3) == 0.5
    # df = 1 is Cauchy: 1/2 + atan(t)/pi; df = 2 has a closed form too.
    for t in (-3.0, -0.5, 0.7, 12.0):
        assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert student_t_cdf(t, 2) == pytest.approx(
            0.5 + t / (2 * math.sqrt(t * t + 2)), abs=1e-12
        )
    assert student_t_cdf(2.015048373, 5) == pytest.approx(0.95, abs=1e-9)  # t table
    assert student_t_cdf(1.96, math.inf) == pytest.approx(0.9750021048517795, abs=1e-15)
    assert student_t_cdf(math.inf, 4) == 1.0 and student_t_cdf(-math.inf, 4) == 0.0
    with pytest.raises(InvalidInputError):
        student_t_cdf(1.0, 0)


def test_student_t_cdf_matches_scipy_to_1e9() -> None:
    rng = random.Random(20261202)
    worst = 0.0
    for _ in range(4000):
        df = rng.choice([rng.uniform(0.2, 5), rng.uniform(5, 300), rng.uniform(300, 1e6)])
        t = rng.gauss(0, 3) * rng.choice([0.01, 1, 4])
        worst = max(worst, abs(student_t_cdf(t, df) - float(scipy_stats.t.cdf(t, df))))
    assert worst < 1e-9


def test_incomplete_beta_matches_scipy() -> None:
    from scipy import special

    rng = random.Random(5)
    for _ in range(2000):
        a, b, x = rng.uniform(0.1, 50), rng.uniform(0.1, 50), rng.random()
        assert regularized_incomplete_beta(x, a, b) == pytest.approx(
            float(special.betainc(a, b, x)), abs=1e-10
        )
    assert regularized_incomplete_beta(0.0, 2, 3) == 0.0
    assert regularized_incomplete_beta(1.0, 2, 3) == 1.0


def test_normal_quantile_known_values_and_scipy() -> None:
    assert normal_quantile(0.5) == 0.0
    assert normal_quantile(0.975) == pytest.approx(1.959963984540054, abs=1e-14)
    assert normal_quantile(0.9) == pytest.approx(1.2815515655446004, abs=1e-14)
    assert normal_quantile(1e-10) == pytest.approx(-6.361340902404056, abs=1e-9)
    rng = random.Random(3)
    for _ in range(2000):
        p = rng.random() or 0.5
        assert normal_quantile(p) == pytest.approx(float(scipy_stats.norm.ppf(p)), abs=1e-9)
    for bad in (0.0, 1.0, -0.1, 2.0):
        with pytest.raises(InvalidInputError):
            normal_quantile(bad)


def test_welch_lift_matches_scipy_welch_test() -> None:
    rng = random.Random(11)
    for _ in range(200):
        a = [rng.gauss(0.6, 0.1) for _ in range(rng.randint(2, 30))]
        b = [rng.gauss(0.55, 0.2) for _ in range(rng.randint(2, 60))]
        res = welch_lift(a, b)
        ref = scipy_stats.ttest_ind(a, b, equal_var=False, alternative="greater")
        assert res.lift == pytest.approx(sum(a) / len(a) - sum(b) / len(b), abs=1e-12)
        assert res.df == pytest.approx(float(ref.df), rel=1e-9)
        assert 1.0 - res.p_exceeds == pytest.approx(float(ref.pvalue), abs=1e-9)


def test_welch_lift_exact_values_threshold_and_floor() -> None:
    a = SampleSummary(4, 0.8, 0.04)
    b = SampleSummary(9, 0.5, 0.09)
    res = welch_lift(a, b, threshold=0.1)
    se = math.sqrt(0.04 / 4 + 0.09 / 9)
    df = (0.04 / 4 + 0.09 / 9) ** 2 / ((0.04 / 4) ** 2 / 3 + (0.09 / 9) ** 2 / 8)
    assert res.lift == pytest.approx(0.3)
    assert res.se == pytest.approx(se) and res.df == pytest.approx(df)
    assert res.p_exceeds == pytest.approx(float(scipy_stats.t.cdf((0.3 - 0.1) / se, df)))

    # The floor raises a small variance; a floored group counts as known (no df penalty).
    tiny = SampleSummary(3, 0.9, 0.0001)
    floored = welch_lift(tiny, b, sd_floor=0.2)
    assert floored.se == pytest.approx(math.sqrt(0.04 / 3 + 0.09 / 9))
    assert floored.df == pytest.approx((0.04 / 3 + 0.09 / 9) ** 2 / ((0.09 / 9) ** 2 / 8))
    both = welch_lift(SampleSummary(3, 0.9, 0.0), SampleSummary(3, 0.5, 0.0), sd_floor=0.1)
    assert both.df == math.inf
    assert both.p_exceeds == pytest.approx(
        float(scipy_stats.norm.cdf(0.4 / math.sqrt(0.01 / 3 * 2)))
    )
    # Zero variance without a floor: certainty either way.
    assert welch_lift([1.0, 1.0], [0.5, 0.5]).p_exceeds == 1.0
    assert welch_lift([0.5, 0.5], [0.5, 0.5]).p_exceeds == 0.0


def test_welch_lift_rejects_small_groups() -> None:
    with pytest.raises(InvalidInputError, match="n >= 2"):
        welch_lift([0.5], [0.5, 0.6])
    with pytest.raises(InvalidInputError):
        welch_lift([0.5, 0.6], [0.5, 0.6], sd_floor=-1)


def test_benjamini_hochberg_step_up() -> None:
    # Textbook example: m = 10 at q = 0.05 -> thresholds 0.005, 0.01, ...
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216]
    assert benjamini_hochberg(p, 0.05) == [True, True] + [False] * 8
    # Step-up: a p-value above its own threshold is rejected when a later rank passes.
    assert benjamini_hochberg([0.04, 0.03], 0.05) == [True, True]
    assert benjamini_hochberg([0.04, 0.06], 0.05) == [False, False]
    assert benjamini_hochberg([], 0.1) == []
    assert benjamini_hochberg([0.2, 0.01, 0.03], 0.1) == [False, True, True]
    with pytest.raises(InvalidInputError):
        benjamini_hochberg([1.5], 0.1)
    with pytest.raises(InvalidInputError):
        benjamini_hochberg([0.5], 0.0)


@given(st.lists(st.floats(0, 1), max_size=30), st.floats(0.01, 1))
@settings(max_examples=200, deadline=None)
def test_benjamini_hochberg_matches_adjusted_p_values(p: list[float], q: float) -> None:
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, p[i] * m / rank)
        adjusted[i] = running
    got = benjamini_hochberg(p, q)
    for i in range(m):
        if abs(adjusted[i] - q) > 1e-12:
            assert got[i] == (adjusted[i] <= q)


def test_required_trials() -> None:
    z = float(scipy_stats.norm.ppf(0.9) + scipy_stats.norm.ppf(0.8))
    assert required_trials(0.2, 0.1) == math.ceil(2 * (z * 0.1 / 0.2) ** 2) == 3
    assert required_trials(0.05, 0.1) == math.ceil(2 * (z * 0.1 / 0.05) ** 2) == 37
    assert required_trials(-0.05, 0.1) == 37
    # Halving the SD cuts the requirement by ~4.
    assert required_trials(0.01, 0.05) == math.ceil(2 * (z * 0.05 / 0.01) ** 2)
    assert required_trials(0.05, 0.1, confidence=0.95, power=0.9) == math.ceil(
        2 * ((1.6448536269514722 + 1.2815515655446004) * 0.1 / 0.05) ** 2
    )
    for kwargs in ({"effect": 0.0, "sd": 0.1}, {"effect": 0.1, "sd": 0.0}):
        with pytest.raises(InvalidInputError):
            required_trials(**kwargs)
    with pytest.raises(InvalidInputError):
        required_trials(0.1, 0.1, confidence=1.0)


@given(
    st.lists(st.floats(0, 1), min_size=1, max_size=40),
    st.data(),
)
@settings(max_examples=200, deadline=None)
def test_subtract_summary_equals_summary_of_the_rest(
    values: list[float], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, len(values)))
    part, rest = values[:k], values[k:]
    got = subtract_summary(summarize(values), summarize(part))
    want = summarize(rest)
    assert got.n == want.n
    assert got.mean == pytest.approx(want.mean, abs=1e-9)
    if want.variance is None:
        assert got.variance is None
    else:
        assert got.variance == pytest.approx(want.variance, abs=1e-9)


def test_pooled_variance_pools_squared_deviations_and_df() -> None:
    a, b = [0.1, 0.4, 0.7], [0.5, 0.52, 0.48, 0.55]
    sa, sb = summarize(a), summarize(b)
    m2 = sum((x - sa.mean) ** 2 for x in a) + sum((x - sb.mean) ** 2 for x in b)
    var, df = pooled_variance(sa, sb)
    assert df == 5 and var == pytest.approx(m2 / 5)
    # A single run adds neither squared deviations nor df; no variance at all: None.
    assert pooled_variance(summarize([0.3]), sb) == (pytest.approx(sb.variance), 3)
    assert pooled_variance(summarize([0.3]), summarize([0.4])) is None
    assert pooled_variance(summarize([]), summarize([])) is None


def test_mixture_p_value_is_one_over_the_mixture_likelihood_ratio() -> None:
    # M = integral over d > 0 of exp(d S - d^2 n / 2) times a half-normal(precision) density.
    for z, n, rho in [(2.0, 3.0, 0.5), (3.1, 1.5, 0.5), (1.0, 50.0, 2.0), (4.0, 10.0, 0.1)]:
        s = z * math.sqrt(n)
        h = 1e-4
        grid = [h * (i + 0.5) for i in range(200_000)]  # d in (0, 20)
        m = sum(
            math.exp(d * s - d * d * n / 2) * 2 * math.sqrt(rho / (2 * math.pi))
            * math.exp(-rho * d * d / 2)
            for d in grid
        ) * h
        assert mixture_p_value(z, n, rho) == pytest.approx(min(1.0, 1 / m), rel=1e-6)
    assert mixture_p_value(0.0, 3.0, 0.5) == 1.0
    assert mixture_p_value(-2.0, 3.0, 0.5) == 1.0
    assert mixture_p_value(math.inf, 3.0, 0.5) == 0.0
    for bad in [(math.nan, 3.0, 0.5), (1.0, 0.0, 0.5), (1.0, 3.0, 0.0), (1.0, math.inf, 1.0)]:
        with pytest.raises(InvalidInputError):
            mixture_p_value(*bad)


def test_mixture_p_value_stays_valid_under_continuous_monitoring() -> None:
    """Looking after every observation: P(p <= alpha at any look) <= alpha (Ville)."""
    rng = random.Random(20261203)
    paths, looks, alpha = 2000, 100, 0.1
    z_once = normal_quantile(1 - alpha)
    ever_mixture = ever_fixed = 0
    for _ in range(paths):
        s = 0.0
        hit_mixture = hit_fixed = False
        for n in range(1, looks + 1):
            s += rng.gauss(0.0, 1.0)  # a null effect: S is a standard random walk
            z = s / math.sqrt(n)
            hit_fixed = hit_fixed or z > z_once
            if not hit_mixture and mixture_p_value(z, n, 0.5) <= alpha:
                hit_mixture = True
        ever_mixture += hit_mixture
        ever_fixed += hit_fixed
    assert ever_mixture / paths <= alpha  # the budget holds over all 100 looks
    assert ever_fixed / paths > 3 * alpha  # a per-look test at alpha does not
