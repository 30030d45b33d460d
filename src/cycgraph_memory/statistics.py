"""Statistical building blocks of the retention gate and the gate simulator.

Pure Python (no numpy needed), exported for advanced composition:

* :func:`welch_lift` - Welch-style inference on the difference of two group means,
* :func:`benjamini_hochberg` - Benjamini-Hochberg false-discovery-rate control,
* :func:`mixture_p_value` - the always-valid p-value of a one-sided normal-mixture
  sequential probability ratio test (valid however often the data are looked at),
* :func:`pooled_variance` - the pooled sample variance of two groups,
* :func:`student_t_cdf` - the Student-t CDF via the regularized incomplete beta function,
* :func:`normal_quantile` - the standard-normal quantile function,
* :func:`mulberry32` - the standard 32-bit Mulberry32 PRNG (same stream as the usual
  JavaScript one-liner, so simulations reproduce across implementations),
* :func:`gaussian` - a standard-normal sample from a uniform PRNG (Box-Muller),
* :func:`required_trials` - the per-group sample size needed to detect an effect.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from statistics import NormalDist
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from cycgraph_memory._validate import changed_from_defaults
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError
from cycgraph_memory.records import Number

__all__ = [
    "RequiredTrialsInput",
    "SampleSummary",
    "WelchResult",
    "benjamini_hochberg",
    "gaussian",
    "mixture_p_value",
    "mulberry32",
    "normal_quantile",
    "pooled_variance",
    "regularized_incomplete_beta",
    "required_trials",
    "student_t_cdf",
    "subtract_summary",
    "summarize",
    "welch_lift",
]

_STANDARD_NORMAL = NormalDist()
_BETA_EPS = 1e-16
_BETA_TINY = 1e-300
_BETA_MAX_ITER = 500


class SampleSummary(NamedTuple):
    """Size, mean and sample variance (``n - 1`` denominator) of one group of scores.

    ``variance`` is ``None`` when ``n < 2``.
    """

    n: int
    mean: float
    variance: float | None


class WelchResult(NamedTuple):
    """Result of :func:`welch_lift`.

    Attributes:
        lift: ``mean(a) - mean(b)``.
        se: Welch standard error of the lift (after the SD floor).
        df: Welch-Satterthwaite degrees of freedom (``math.inf`` when both variances are
            known, i.e. set by the floor).
        p_exceeds: P(true lift > ``threshold``) under the t approximation.
    """

    lift: float
    se: float
    df: float
    p_exceeds: float


def summarize(values: Sequence[float]) -> SampleSummary:
    """Return the :class:`SampleSummary` of a sequence of scores (two-pass, stable).

    Raises:
        InvalidTypeError: ``values`` is not a sequence of real numbers.
    """
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidTypeError(
            f"values must be a sequence of numbers, got {type(values).__name__}"
        )
    if not isinstance(values, Sequence):
        values = list(values)
    n = len(values)
    if n == 0:
        return SampleSummary(0, 0.0, None)
    try:
        mean = math.fsum(values) / n
    except TypeError:
        for v in values:
            _real(v, "a value")
        raise
    if n < 2:
        return SampleSummary(n, mean, None)
    m2 = math.fsum((x - mean) ** 2 for x in values)
    return SampleSummary(n, mean, m2 / (n - 1))


def subtract_summary(total: SampleSummary, part: SampleSummary) -> SampleSummary:
    """Summary of ``total``'s values minus ``part``'s (a sub-multiset of them).

    Reverses Chan et al.'s pairwise combination of means and sums of squared deviations:
    this is how a leave-one-out baseline is derived from the all-runs baseline and one
    fact's statistics without rescanning runs. The sum of squares is clamped at 0 against
    rounding.

    Raises:
        InvalidInputError: ``part`` larger than ``total``.
        InvalidTypeError: ``total`` or ``part`` is not a :class:`SampleSummary`.
    """
    _check_summary(total, "total")
    _check_summary(part, "part")
    if part.n > total.n:
        raise InvalidInputError(f"cannot remove {part.n} values from {total.n}")
    n = total.n - part.n
    if n == 0:
        return SampleSummary(0, 0.0, None)
    if part.n == 0:
        return total
    mean = (total.n * total.mean - part.n * part.mean) / n
    if n < 2:
        return SampleSummary(n, mean, None)
    m2_total = (total.variance or 0.0) * (total.n - 1)
    m2_part = (part.variance or 0.0) * (part.n - 1)
    delta = part.mean - mean
    m2 = m2_total - m2_part - delta * delta * part.n * n / total.n
    return SampleSummary(n, mean, max(m2, 0.0) / (n - 1))


def _real(value: object, name: str) -> float:
    """``value`` when it is a real number (not a bool); else :class:`InvalidTypeError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _check_summary(value: object, name: str) -> None:
    if not isinstance(value, SampleSummary):
        raise InvalidTypeError(f"{name} must be a SampleSummary, got {type(value).__name__}")


def _as_summary(group: SampleSummary | Sequence[float], name: str) -> SampleSummary:
    if isinstance(group, SampleSummary):
        summary = group
    else:
        if isinstance(group, str | bytes) or not isinstance(group, Iterable):
            raise InvalidTypeError(
                f"group {name} must be a SampleSummary or a sequence of numbers, got "
                f"{type(group).__name__}"
            )
        summary = summarize([_real(v, f"a value of group {name}") for v in group])
    if summary.n < 2 or summary.variance is None:
        raise InvalidInputError(f"welch_lift needs n >= 2 in group {name}, got {summary.n}")
    if summary.variance < 0 or not math.isfinite(summary.variance):
        raise InvalidInputError(f"group {name} has an invalid variance {summary.variance!r}")
    return summary


def welch_lift(
    a: SampleSummary | Sequence[float],
    b: SampleSummary | Sequence[float],
    *,
    threshold: float = 0.0,
    sd_floor: float = 0.0,
) -> WelchResult:
    """Welch-style inference on ``lift = mean(a) - mean(b)``.

    Each group's variance is raised to at least ``sd_floor ** 2`` before the test: the floor
    encodes known judge noise so that tiny samples cannot fake certainty. A group whose
    variance comes from the floor counts as having a *known* variance, so it contributes
    no estimation uncertainty to the Welch-Satterthwaite degrees of freedom (if both groups
    are floored the statistic is a z statistic, ``df = inf``).

    Args:
        a: Scores of the runs with the lesson, or their :class:`SampleSummary`.
        b: Scores of the comparison runs (the leave-one-out baseline), or their summary.
        threshold: The lift to exceed (``p_exceeds = P(true lift > threshold)``).
        sd_floor: Per-group SD floor, ``>= 0``.

    Returns:
        The :class:`WelchResult`.

    Raises:
        InvalidInputError: A group with fewer than two values, or a negative floor.
        InvalidTypeError: A group, ``threshold`` or ``sd_floor`` of the wrong type.
    """
    threshold, sd_floor = _real(threshold, "threshold"), _real(sd_floor, "sd_floor")
    if sd_floor < 0 or not math.isfinite(sd_floor):
        raise InvalidInputError(f"sd_floor must be a finite number >= 0, got {sd_floor!r}")
    sa, sb = _as_summary(a, "a"), _as_summary(b, "b")
    floor_var = sd_floor * sd_floor
    lift = sa.mean - sb.mean
    wa, wb = max(sa.variance or 0.0, floor_var) / sa.n, max(sb.variance or 0.0, floor_var) / sb.n
    total = wa + wb
    se = math.sqrt(total)
    # A floored variance is treated as known: it adds nothing to the df denominator.
    denom = 0.0
    if (sa.variance or 0.0) > floor_var:
        denom += wa * wa / (sa.n - 1)
    if (sb.variance or 0.0) > floor_var:
        denom += wb * wb / (sb.n - 1)
    df = math.inf if denom == 0.0 else total * total / denom
    if se == 0.0:
        p = 1.0 if lift > threshold else 0.0
    else:
        p = student_t_cdf((lift - threshold) / se, df)
    return WelchResult(lift, se, df, p)


def pooled_variance(a: SampleSummary, b: SampleSummary) -> tuple[float, int] | None:
    """Pooled sample variance of two groups and its degrees of freedom.

    ``(sum of squared deviations of a and of b) / (n_a + n_b - 2)``: under the hypothesis
    of no effect both groups carry the same run noise, and this estimates it with the df of
    both groups (three runs of a lesson alone cannot). A group of one run adds no squared
    deviation but does not count against the df either.

    Returns:
        ``(variance, df)``, or ``None`` when no group has a variance (``df < 1``).

    Raises:
        InvalidTypeError: ``a`` or ``b`` is not a :class:`SampleSummary`.
    """
    _check_summary(a, "a")
    _check_summary(b, "b")
    m2 = 0.0
    df = 0
    for g in (a, b):
        if g.n >= 2 and g.variance is not None:
            m2 += g.variance * (g.n - 1)
            df += g.n - 1
    if df < 1:
        return None
    return m2 / df, df


def mixture_p_value(z: float, information: float, precision: float) -> float:
    """Always-valid p-value of a one-sided normal-mixture SPRT (Robbins' mixture).

    ``z`` is the usual z statistic ``(estimate - null value) / se`` and ``information`` the
    sample size in the units of the mixture, so ``S = z * sqrt(information)`` is, under the
    null, a standard Brownian motion in ``information`` as data accrue (true for a
    difference of two means whenever each look's data contain the previous look's). Mixing
    the likelihood ratio ``exp(d S - d^2 n / 2)`` over a half-normal prior on the drift
    ``d > 0`` with precision ``precision`` gives the martingale

    ``M = 2 sqrt(rho / (n + rho)) exp(S^2 / (2 (n + rho))) Phi(S / sqrt(n + rho))``

    (``n = information``, ``rho = precision``), which starts at 1. By Ville's inequality
    ``P(M >= 1/alpha at any look) <= alpha``, so ``p = min(1, 1/M)`` may be compared with
    ``alpha`` after every new run without inflating the error: the test is *always valid*.
    A larger ``precision`` tightens the boundary at large samples and loosens it at small
    ones.

    Args:
        z: The z statistic (positive: evidence against the null in the tested direction).
        information: Sample size in mixture units, ``> 0``.
        precision: Prior precision ``rho`` of the mixture, ``> 0``.

    Returns:
        The always-valid p-value in ``(0, 1]``.

    Raises:
        InvalidInputError: A NaN ``z`` or a non-positive ``information``/``precision``.
        InvalidTypeError: An argument that is not a real number.
    """
    if type(z) is not float or type(information) is not float or type(precision) is not float:
        z, information = _real(z, "z"), _real(information, "information")
        precision = _real(precision, "precision")
    if math.isnan(z):
        raise InvalidInputError("z must be a number, got nan")
    if not (math.isfinite(information) and information > 0):
        raise InvalidInputError(f"information must be a finite number > 0, got {information!r}")
    if not (math.isfinite(precision) and precision > 0):
        raise InvalidInputError(f"precision must be a finite number > 0, got {precision!r}")
    if z <= 0.0:
        return 1.0  # the likelihood ratio is < 1 for every positive drift
    if math.isinf(z):
        return 0.0
    s = z * math.sqrt(information)
    v = information + precision
    log_m = (
        math.log(2.0)
        + 0.5 * math.log(precision / v)
        + s * s / (2.0 * v)
        + math.log(_STANDARD_NORMAL.cdf(s / math.sqrt(v)))
    )
    return 1.0 if log_m <= 0.0 else math.exp(-log_m)


_THRESHOLD_SLACK = 1e-12


def at_most(p: float, bound: float) -> bool:
    """``p <= bound``, allowing a relative ``1e-12`` for the rounding of a computed bound.

    A threshold such as ``1 - 0.9`` (``0.09999999999999998``) or ``7 / 10 * 0.1``
    (``0.06999999999999999``) lands a hair below the decimal it stands for; a p-value
    exactly on the documented threshold must not be lost to that.
    """
    return p <= bound * (1.0 + _THRESHOLD_SLACK)


def benjamini_hochberg(p_values: Sequence[float], q: float) -> list[bool]:
    """Benjamini-Hochberg step-up procedure at false-discovery rate ``q``.

    Args:
        p_values: One p-value per hypothesis, each in ``[0, 1]``.
        q: Target false-discovery rate, in ``(0, 1]``.

    Returns:
        ``rejected[i]`` is True when hypothesis ``i`` is rejected (a discovery), in input
        order. With ``m`` p-values sorted ascending, every hypothesis up to the largest
        rank ``k`` with ``p_(k) <= k / m * q`` is rejected. The comparison allows a relative
        ``1e-12`` for the rounding of ``k / m * q`` (``0.07`` at rank 7 of 10 with
        ``q = 0.1`` sits exactly on its threshold and is rejected, as in scipy and R).

    Raises:
        InvalidInputError: ``q`` outside ``(0, 1]`` or a p-value outside ``[0, 1]``.
        InvalidTypeError: ``p_values`` is not a sequence of real numbers, or ``q`` is not
            a real number.
    """
    q = _real(q, "q")
    if not 0.0 < q <= 1.0:
        raise InvalidInputError(f"q must be in (0, 1], got {q!r}")
    if isinstance(p_values, str | bytes) or not isinstance(p_values, Iterable):
        raise InvalidTypeError(
            f"p_values must be a sequence of numbers, got {type(p_values).__name__}"
        )
    if not isinstance(p_values, Sequence):
        p_values = list(p_values)
    m = len(p_values)
    for p in p_values:
        if type(p) is not float:
            _real(p, "a p-value")
        if not 0.0 <= p <= 1.0:
            raise InvalidInputError(f"p-values must be in [0, 1], got {p!r}")
    order = sorted(range(m), key=lambda i: (p_values[i], i))
    cutoff = 0
    for rank, i in enumerate(order, start=1):
        if at_most(p_values[i], rank * q / m):
            cutoff = rank
    rejected = [False] * m
    for i in order[:cutoff]:
        rejected[i] = True
    return rejected


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _BETA_TINY:
        d = _BETA_TINY
    d = 1.0 / d
    h = d
    for m in range(1, _BETA_MAX_ITER + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = _BETA_TINY if abs(d) < _BETA_TINY else d
        c = 1.0 + aa / c
        c = _BETA_TINY if abs(c) < _BETA_TINY else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = _BETA_TINY if abs(d) < _BETA_TINY else d
        c = 1.0 + aa / c
        c = _BETA_TINY if abs(c) < _BETA_TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _BETA_EPS:
            break
    return h


def _stirling_tail(z: float) -> float:
    return 1.0 / (12.0 * z) - 1.0 / (360.0 * z**3) + 1.0 / (1260.0 * z**5)


def _log_beta(a: float, b: float) -> float:
    """``ln B(a, b)``, without the cancellation of three huge ``lgamma`` values."""
    small, large = min(a, b), max(a, b)
    if large < 1e3:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # ln G(x + s) - ln G(x) = (x - 1/2) ln(1 + s/x) + s ln(x + s) - s + tail(x + s) - tail(x)
    x, s = large, small
    ratio = (x - 0.5) * math.log1p(s / x) + s * math.log(x + s) - s
    ratio += _stirling_tail(x + s) - _stirling_tail(x)
    return math.lgamma(small) - ratio


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` for ``a, b > 0``.

    Raises:
        InvalidInputError: ``x`` outside ``[0, 1]`` or a non-positive shape.
        InvalidTypeError: An argument that is not a real number.
    """
    x, a, b = _real(x, "x"), _real(a, "a"), _real(b, "b")
    if not 0.0 <= x <= 1.0:
        raise InvalidInputError(f"x must be in [0, 1], got {x!r}")
    if a <= 0 or b <= 0:
        raise InvalidInputError(f"shapes must be > 0, got a={a!r}, b={b!r}")
    if x == 0.0 or x == 1.0:
        return x
    log_front = a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b)
    front = math.exp(log_front)
    # The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry
    # I_x(a, b) = 1 - I_{1-x}(b, a) on the other side.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` (real, ``> 0``) degrees of freedom.

    Computed through the regularized incomplete beta function:
    ``P(T <= t) = 1 - I_x(df/2, 1/2) / 2`` for ``t > 0`` with ``x = df / (df + t^2)``.
    ``df = inf`` gives the standard normal CDF.

    Raises:
        InvalidInputError: ``df <= 0`` or NaN input.
    """
    if type(t) is not float or type(df) is not float:  # the gate's calls: floats already
        t, df = _real(t, "t"), _real(df, "df")
    if math.isnan(t) or math.isnan(df) or df <= 0:
        raise InvalidInputError(f"need a number t and df > 0, got t={t!r}, df={df!r}")
    if math.isinf(df):
        return _STANDARD_NORMAL.cdf(t)
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if t == 0.0:
        return 0.5
    t2 = t * t
    if t2 < df:
        # Near the centre x = df / (df + t^2) is close to 1 and 1 - x loses precision;
        # use I_{1-x}(1/2, df/2) with 1 - x computed directly instead.
        tail = 0.5 * (1.0 - regularized_incomplete_beta(t2 / (df + t2), 0.5, df / 2.0))
    else:
        tail = 0.5 * regularized_incomplete_beta(df / (df + t2), df / 2.0, 0.5)
    return 1.0 - tail if t > 0 else tail


def normal_quantile(p: float) -> float:
    """Standard-normal quantile (inverse CDF) for ``0 < p < 1``.

    Uses Wichura's algorithm AS241 (the standard library's ``NormalDist.inv_cdf``), accurate
    to about 1e-16.

    Raises:
        InvalidInputError: ``p`` outside ``(0, 1)``.
    """
    p = _real(p, "p")
    if not 0.0 < p < 1.0:
        raise InvalidInputError(f"p must be in (0, 1), got {p!r}")
    return _STANDARD_NORMAL.inv_cdf(p)


def mulberry32(seed: int) -> Callable[[], float]:
    """Return a deterministic uniform PRNG on ``[0, 1)``: the standard 32-bit Mulberry32.

    The stream equals the common JavaScript implementation for the same 32-bit seed
    (``seed`` is reduced modulo 2**32), e.g. seed 1 starts ``0.6270739405881613``.

    Raises:
        InvalidInputError: A seed that is not an int.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InvalidInputError(f"seed must be an int, got {type(seed).__name__}")
    state = seed & 0xFFFFFFFF

    def next_uniform() -> float:
        nonlocal state
        state = (state + 0x6D2B79F5) & 0xFFFFFFFF
        t = state
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xFFFFFFFF
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296.0

    return next_uniform


def gaussian(rng: Callable[[], float]) -> float:
    """One standard-normal sample from the uniform PRNG ``rng`` (Box-Muller, cosine branch).

    Draws two uniforms ``u, v`` and returns ``sqrt(-2 ln(1 - u)) * cos(2 pi v)``
    (``1 - u`` keeps the logarithm finite since ``u`` may be 0).

    Raises:
        InvalidTypeError: ``rng`` is not callable or does not return real numbers.
    """
    if not callable(rng):
        raise InvalidTypeError(f"rng must be a callable PRNG, got {type(rng).__name__}")
    u = rng()
    v = rng()
    if type(u) is not float or type(v) is not float:
        u, v = _real(u, "rng()"), _real(v, "rng()")
    return math.sqrt(-2.0 * math.log(1.0 - u)) * math.cos(2.0 * math.pi * v)


class RequiredTrialsInput(BaseModel):
    """The input of :func:`required_trials` as one object (the spec's ``RequiredTrialsInput``).

    ``required_trials(RequiredTrialsInput(effect=0.2, sd=0.1))`` or
    ``required_trials({"effect": 0.2, "sd": 0.1})`` is ``required_trials(0.2, 0.1)``.

    Attributes:
        effect: Smallest lift to detect; required.
        sd: Run-score standard deviation; required.
        confidence: Decision confidence (default 0.9).
        power: Desired detection power (default 0.8).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    effect: Number
    sd: Number
    confidence: Number = 0.9
    power: Number = 0.8


def required_trials(
    effect: float | RequiredTrialsInput | Mapping[str, float],
    sd: float | None = None,
    *,
    confidence: float = 0.9,
    power: float = 0.8,
) -> int:
    """Approximate per-group runs needed to detect ``effect``: ``2 ((z_a + z_b) sd / effect)^2``.

    ``z_a`` is the one-sided normal quantile of ``confidence`` and ``z_b`` that of ``power``;
    the result is rounded up, and is at least 1 (an effect far above the noise needs one
    run per group, not zero); an effect tiny next to ``sd`` gives the exact (huge) integer
    instead of overflowing. Halving ``sd`` cuts it by 4; halving ``effect`` multiplies
    it by 4. The input may also be one :class:`RequiredTrialsInput` or dict (the spec's
    ``requiredTrials({ effect, sd })``), with no other argument.

    Args:
        effect: Smallest lift to detect (its magnitude is used; must not be 0), or the
            whole input as a ``RequiredTrialsInput`` / mapping.
        sd: Run-score standard deviation, ``> 0`` (required unless ``effect`` is the
            whole input).
        confidence: Decision confidence, in ``(0, 1)`` (default 0.9, as in the policy).
        power: Desired detection power, in ``(0, 1)`` (default 0.8).

    Raises:
        InvalidInputError: Any argument out of range, a missing ``sd``, or the whole input
            given together with other arguments.
        InvalidTypeError: An argument that is not a real number.
        pydantic.ValidationError: The input given as a mapping that does not validate.
    """
    if isinstance(effect, RequiredTrialsInput | Mapping):
        given = changed_from_defaults(
            ("sd", sd, None), ("confidence", confidence, 0.9), ("power", power, 0.8)
        )
        if given:
            raise InvalidInputError(
                "required_trials: give the input either as one RequiredTrialsInput "
                f"(or mapping) or as arguments, not both (also given: {', '.join(sorted(given))})"
            )
        bundle = (
            effect
            if isinstance(effect, RequiredTrialsInput)
            else RequiredTrialsInput.model_validate(dict(effect))
        )
        effect, sd = bundle.effect, bundle.sd
        confidence, power = bundle.confidence, bundle.power
    if sd is None:
        raise InvalidInputError("required_trials needs sd (the run-score standard deviation)")
    effect, sd = _real(effect, "effect"), _real(sd, "sd")
    confidence, power = _real(confidence, "confidence"), _real(power, "power")
    if not math.isfinite(effect) or effect == 0:
        raise InvalidInputError(f"effect must be a finite non-zero number, got {effect!r}")
    if not math.isfinite(sd) or sd <= 0:
        raise InvalidInputError(f"sd must be a finite number > 0, got {sd!r}")
    z = normal_quantile(confidence) + normal_quantile(power)
    try:
        runs = 2.0 * (z * sd / abs(effect)) ** 2
    except OverflowError:  # ``** 2`` of a huge ratio: past every float
        runs = math.inf
    if not math.isfinite(runs):
        # An effect tiny next to the SD (1e-200 against 0.1): the answer is a huge but
        # finite integer, computed exactly from the same float inputs.
        ratio = Fraction(z) * Fraction(sd) / Fraction(abs(effect))
        return math.ceil(2 * ratio * ratio)
    # At least one run per group: an effect huge next to the SD needs one, not zero.
    return max(1, math.ceil(runs - 1e-12))
