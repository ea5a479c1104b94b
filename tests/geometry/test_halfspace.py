"""The half-space test of Proposition 4.1 (:mod:`sinkscope.geometry.halfspace`) on point sets that
do or do not lie in an open half-space, with planted margins, and the sink-attending tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sinkscope.geometry.halfspace import attending_tokens
from sinkscope.geometry.halfspace_solver import HALFSPACE_TOL, halfspace_margin

# ----------------------------------------------------------------------------- half-spaces


def _cone(theta: float, dim: int, n_inner: int, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors at angle exactly ``theta`` from e_0 in four opposing directions, plus
    ``n_inner`` random points strictly inside the cone: the optimal margin is cos(theta)."""
    e = np.eye(dim)
    rim = [math.cos(theta) * e[0] + s * math.sin(theta) * e[k] for k in (1, 2) for s in (1, -1)]
    inner = []
    for _ in range(n_inner):
        u = rng.normal(size=dim)
        u[0] = 0.0
        u /= np.linalg.norm(u)
        angle = rng.uniform(0.0, 0.9 * theta)
        inner.append(rng.uniform(0.5, 3.0) * (math.cos(angle) * e[0] + math.sin(angle) * u))
    return np.array(rim + inner)


def test_halfspace_infeasible_with_opposite_vectors() -> None:
    v = np.array([1.0, 2.0, -0.5, 0.0])
    result = halfspace_margin(np.stack([v, np.ones(4), -3.0 * v]))
    assert result.halfspace is False and result.margin == 0.0
    assert result.margin_upper is not None and result.margin_upper < 1e-12
    assert not result.trivially_separable and result.rank == 2
    # origin in the hull of three vectors in a plane (n <= d but rank-deficient)
    e = np.eye(5)
    assert halfspace_margin(np.stack([e[0], e[1], -(e[0] + e[1])])).halfspace is False


@pytest.mark.parametrize(("theta", "dim", "n_inner"), [(0.3, 3, 60), (1.2, 3, 200), (1.0, 8, 5)])
def test_halfspace_cone_has_the_planted_margin(theta: float, dim: int, n_inner: int) -> None:
    points = _cone(theta, dim, n_inner, np.random.default_rng(2))
    result = halfspace_margin(points)
    assert result.halfspace is True
    assert result.margin == pytest.approx(math.cos(theta), abs=1e-10)
    assert result.margin_upper == pytest.approx(math.cos(theta), abs=1e-10)
    assert result.n_points == points.shape[0] and result.dim == dim
    # more points than dimensions: never trivially separable
    assert result.trivially_separable is (points.shape[0] <= dim)


def test_halfspace_more_points_than_dimensions_around_the_origin() -> None:
    rng = np.random.default_rng(3)
    result = halfspace_margin(rng.normal(size=(60, 4)))
    assert result.halfspace is False and result.margin == 0.0
    assert result.margin_upper < HALFSPACE_TOL
    # the same points shifted far along e_0 all lie in a half-space
    shifted = rng.normal(size=(60, 4)) + np.array([20.0, 0, 0, 0])
    assert halfspace_margin(shifted).halfspace is True


def test_halfspace_trivial_when_few_independent_points() -> None:
    rng = np.random.default_rng(4)
    points = rng.normal(size=(10, 30))
    result = halfspace_margin(points)
    assert result.rank == 10 and result.trivially_separable and result.halfspace
    assert 0 < result.margin <= result.margin_upper + 1e-12
    # a duplicated point leaves the answer unchanged but removes triviality
    dup = halfspace_margin(np.vstack([points, points[:1]]))
    assert dup.rank == 10 and not dup.trivially_separable and dup.halfspace
    assert dup.margin == pytest.approx(result.margin, abs=1e-10)


def test_halfspace_zero_vector_and_empty_set() -> None:
    zero = halfspace_margin(np.array([[1.0, 0.0], [0.0, 0.0]]))
    assert zero.halfspace is False and zero.margin == 0.0 and not zero.trivially_separable
    empty = halfspace_margin(np.zeros((0, 3)))
    assert empty.halfspace is None and empty.margin is None and empty.n_points == 0


def test_halfspace_margin_matches_a_dense_angle_scan_in_2d() -> None:
    rng = np.random.default_rng(5)
    angles = np.linspace(-np.pi, np.pi, 400_001)
    directions = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    for trial in range(12):
        centre = rng.uniform(-np.pi, np.pi)
        spread = rng.uniform(0.2, 2.0) if trial % 3 else rng.uniform(3.2, 6.0)
        phis = centre + rng.uniform(-spread / 2, spread / 2, size=rng.integers(2, 25))
        points = np.stack([np.cos(phis), np.sin(phis)], axis=1) * rng.uniform(
            0.1, 5, (phis.size, 1)
        )
        units = points / np.linalg.norm(points, axis=1, keepdims=True)
        scan = float((directions @ units.T).min(axis=1).max())
        result = halfspace_margin(points)
        # the scan's spacing is 1.6e-5 rad: its maximum is within 1e-5 of the true margin
        if abs(scan) > 2e-5:
            assert result.halfspace is (scan > 0)
        assert result.margin == pytest.approx(max(scan, 0.0), abs=2e-5)


def test_proposition_41_witness_from_both_conditions() -> None:
    """If both sets lie in half-spaces (witnesses u and v), W = u v^T realises the sink."""
    rng = np.random.default_rng(6)
    d = 6
    z0 = -4.0 * np.eye(d)[0]
    tokens = _cone(0.8, d, 30, rng)  # all tokens in a cone around e_0, BOS opposite
    diff = halfspace_margin(z0[None] - tokens)
    attend = halfspace_margin(tokens)
    assert diff.halfspace and attend.halfspace
    u = tokens.mean(axis=0)  # a witness for the cone
    v = (z0[None] - tokens).mean(axis=0)
    assert np.all(tokens @ u > 0) and np.all((z0[None] - tokens) @ v > 0)
    w = np.outer(u, v)
    scores_bos = tokens @ w @ z0
    scores = tokens @ w @ tokens.T
    assert np.all(scores_bos[:, None] > scores)
    # an attending token opposite to the others breaks the second condition
    broken = np.vstack([tokens, -tokens[:1]])
    assert halfspace_margin(broken).halfspace is False


def test_attending_tokens() -> None:
    att = np.array([[[0.5, 0.49, 0.1], [0.0, 0.2, 0.9]]])  # (N=1, S=2, T=3)
    np.testing.assert_array_equal(attending_tokens(att, 0.5), [[True, False, True]])
    np.testing.assert_array_equal(attending_tokens(att, 0.95), [[False, False, False]])
    assert attending_tokens(np.zeros((2, 0, 4))).shape == (2, 4)
    assert not attending_tokens(np.zeros((2, 0, 4))).any()


def test_halfspace_table_columns_are_the_pair_key_and_the_result_fields() -> None:
    """The per-pair ``halfspace`` table and the long-context table share the pair key and the
    :class:`HalfspaceResult` columns, stated once in :mod:`sinkscope.geometry.halfspace`."""
    from sinkscope.geometry.analysis import TABLE_COLUMNS
    from sinkscope.geometry.halfspace import PAIR_KEY, RESULT_COLUMNS

    assert PAIR_KEY == ("model", "dataset", "layer", "sequence")
    assert RESULT_COLUMNS == (
        "n_points",
        "dim",
        "rank",
        "trivially_separable",
        "halfspace",
        "margin",
        "margin_upper",
        "n_support",
        "solved",
    )
    assert TABLE_COLUMNS["halfspace"] == (
        *PAIR_KEY,
        "point_set",
        *RESULT_COLUMNS,
        "n_sink_heads",
        "attend_threshold",
    )


def test_wendel_probability_against_counting_and_the_lp() -> None:
    """Wendel's null: small cases by hand, the known symmetries (N <= d: 1; N = 2d: 1/2), and the
    frequency with which the module's own half-space test finds random Gaussian points in an
    open half-space (500 draws each)."""
    from sinkscope.geometry.halfspace_solver import halfspace_margin, wendel_probability

    assert wendel_probability(6, 3) == pytest.approx((1 + 5 + 10) / 32)
    assert wendel_probability(3, 5) == 1.0 and wendel_probability(6, 6) == 1.0
    assert wendel_probability(2 * 576, 576) == pytest.approx(0.5)  # symmetric binomial, N = 2d
    assert wendel_probability(1023, 576) > 0.9999  # the default long context in SmolLM2's d
    assert wendel_probability(1440, 576) < 1e-10  # N = 2.5 d
    rng = np.random.default_rng(0)
    for n, d in ((8, 3), (12, 5)):
        hits = sum(
            bool(halfspace_margin(rng.standard_normal((n, d))).halfspace) for _ in range(500)
        )
        expected = wendel_probability(n, d)
        assert abs(hits / 500 - expected) < 4 * math.sqrt(expected * (1 - expected) / 500)


# ------------------------------------------------- the solver's bracket, its budget, the null


@pytest.mark.parametrize(("n", "d", "shift"), [(400, 150, 0.0), (400, 150, 0.12), (300, 40, 0.5)])
def test_the_bracket_closes_however_large_the_support_grows(n: int, d: int, shift: float) -> None:
    """Sets around the origin (support ~ d: many updates and downdates of the passive inverse)
    and sets with a weak or strong common direction: the certified lower end (checked on the
    vectors) meets the upper end (the norm of a hull point), so the margin is proven optimal
    whatever the path of the solver; a set around the origin ends within round-off of it."""
    rng = np.random.default_rng(n + d)
    points = rng.standard_normal((n, d)) + shift * np.ones(d)
    result = halfspace_margin(points)
    assert result.solved
    if result.halfspace:
        assert result.margin == pytest.approx(result.margin_upper, abs=1e-9)
        assert result.n_support > 1
    else:
        assert shift == 0.0  # 2.7 points per dimension around the origin: Wendel ~ 1e-12
        assert result.margin == 0.0 and result.margin_upper < 1e-8
    assert (shift == 0.0) is (not result.halfspace)


def test_a_solve_out_of_time_keeps_a_valid_bracket_and_is_undecided() -> None:
    """No time at all: the trivial bracket [0, 1]; a little time: a bracket that still contains
    the margin of the full solve; a set proven in a half-space by the first step's bracket is
    decided even though the solve did not finish. The budget is a step count: the same seconds
    stop the same solve at the same place, whatever the machine's load."""
    from sinkscope.geometry.halfspace_solver import STEP_S_PER_POINT2, budget_steps

    rng = np.random.default_rng(4)
    around_origin = rng.standard_normal((600, 200))
    full = halfspace_margin(around_origin)
    assert full.solved and full.halfspace is False
    none = halfspace_margin(around_origin, max_seconds=0.0)
    assert (none.solved, none.halfspace, none.margin, none.margin_upper) == (False, None, 0.0, 1.0)
    ten_steps = 10.5 * STEP_S_PER_POINT2 * 600**2
    assert budget_steps(ten_steps, 600) == 10 and budget_steps(None, 600) is None
    short = halfspace_margin(around_origin, max_seconds=ten_steps)
    assert not short.solved and short.halfspace is None
    assert short.margin == 0.0 and full.margin_upper <= short.margin_upper <= 1.0
    assert short == halfspace_margin(around_origin, max_seconds=ten_steps)  # the same place
    assert short.n_support <= 10
    # a narrow cone: after one step the hull point is one of its vectors, which already proves it
    cone = _cone(0.2, 6, 40, rng)
    stopped = halfspace_margin(cone, max_seconds=1.5 * STEP_S_PER_POINT2 * len(cone) ** 2)
    assert not stopped.solved and stopped.halfspace is True
    assert 0 < stopped.margin <= math.cos(0.2) + 1e-12 <= stopped.margin_upper + 1e-12


def test_a_solve_stopped_below_a_target_keeps_a_certified_bound_under_it() -> None:
    """``stop_below`` ends a solve once its certified upper bound on the margin is under the
    target: around the origin (true margin 0) it stops long before the full solve, with the
    bound under the target; on a planted cone (margin cos 0.3) a target above the margin stops
    with a bound between the two, and a target below the margin never fires (the bound can
    never fall below the true margin), so the solve ends at the planted margin."""
    rng = np.random.default_rng(11)
    around_origin = rng.standard_normal((300, 100))
    full = halfspace_margin(around_origin)
    stopped = halfspace_margin(around_origin, stop_below=0.2)
    assert full.solved and full.halfspace is False and full.margin_upper < 1e-8
    assert not stopped.solved and stopped.halfspace is None and stopped.margin == 0.0
    assert full.margin_upper <= stopped.margin_upper < 0.2
    assert stopped.n_support < full.n_support / 2
    cone = _cone(0.3, 8, 60, rng)
    planted = math.cos(0.3)
    early = halfspace_margin(cone, stop_below=0.999)
    assert not early.solved and planted - 1e-12 <= early.margin_upper < 0.999
    assert early.halfspace is True and early.margin <= planted + 1e-12  # proven on the way
    never = halfspace_margin(cone, stop_below=0.5 * planted)
    assert never.solved and never == halfspace_margin(cone)
    assert never.margin == pytest.approx(planted, abs=1e-9)


def test_the_stopping_rule_reads_the_hull_points_norm_off_the_dual() -> None:
    """The norm the stop compares, from ``u`` and the dual ``b - (G + 1 1^T) u`` alone, is the
    norm of the hull point ``sum_k u_k v_k / sum_k u_k`` computed on the vectors."""
    from sinkscope.geometry.halfspace_solver import _hull_norm

    rng = np.random.default_rng(12)
    v = rng.standard_normal((40, 7))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = v @ v.T + 1.0
    for _ in range(5):
        u = np.where(rng.random(40) < 0.3, rng.random(40), 0.0)
        dual = 1.0 - q @ u
        point = (u / u.sum()) @ v
        assert _hull_norm(u, dual, np.ones(40)) == pytest.approx(np.linalg.norm(point), rel=1e-9)
    assert _hull_norm(np.zeros(40), np.ones(40), np.ones(40)) == math.inf


def test_the_gaussian_null_has_wendels_probability_and_the_sets_covariance() -> None:
    """The null keeps the set's size, dimension and covariance and drops its mean: a set far
    from the origin passes the test and its null does not (3 points per dimension); at N = 2d
    the nulls pass half the time, Wendel's probability; their covariance is the set's."""
    from sinkscope.geometry.halfspace_solver import gaussian_null_margin, wendel_probability

    rng = np.random.default_rng(5)
    d = 30
    points = rng.standard_normal((3 * d, d)) + 2.0 * rng.standard_normal(d)
    assert halfspace_margin(points).halfspace is True
    null = gaussian_null_margin(points, rng)
    assert null.solved and null.halfspace is False and null.n_points == 3 * d and null.dim == d
    # N = 2d: Wendel's 1/2 whatever the covariance (a stretched, correlated set)
    base = rng.standard_normal((12, 6)) @ rng.standard_normal((6, 6)) + 5.0
    hits = sum(bool(gaussian_null_margin(base, rng).halfspace) for _ in range(400))
    assert wendel_probability(12, 6) == pytest.approx(0.5)
    assert abs(hits / 400 - 0.5) < 4 * math.sqrt(0.25 / 400)
    # the null's second moment is the set's covariance (averaged over draws)
    wide = rng.standard_normal((400, 3)) @ np.array([[2.0, 0, 0], [1.0, 0.5, 0], [0, 0, 0.1]])
    draws = [_draw(wide, rng) for _ in range(20)]
    second = np.mean([g.T @ g / g.shape[0] for g in draws], axis=0)
    np.testing.assert_allclose(second, np.cov(wide.T), rtol=0.1, atol=0.02)


def _draw(points: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The null sample of :func:`gaussian_null_margin`, drawn the same way (its definition)."""
    centred = points - points.mean(axis=0)
    return rng.standard_normal((len(points),) * 2) @ centred / math.sqrt(len(points) - 1)


def test_the_auto_length_is_two_and_a_half_points_per_dimension_within_the_positions() -> None:
    from sinkscope.config import long_context_seq_len
    from sinkscope.geometry.halfspace_solver import wendel_probability

    assert long_context_seq_len("auto", 2.5, 576, 8192) == 1441  # SmolLM2-135M
    assert long_context_seq_len("auto", 2.5, 640, 32768) == 1601  # Gemma-3-270M
    assert long_context_seq_len("auto", 2.5, 4096, 131072) == 10241  # Llama-3.1-8B
    assert long_context_seq_len("auto", 2.5, 1024, 1024) == 1024  # GPT-2 medium: its positions
    assert long_context_seq_len("auto", 3.0, 100, None) == 301
    assert long_context_seq_len(600, 2.5, 576, 8192) == 600  # a number is taken as it is
    for d in (64, 576, 4096):  # random points fail the test at the auto length
        points = long_context_seq_len("auto", 2.5, d, None) - 1
        assert wendel_probability(points, d) < (0.01 if d == 64 else 1.3e-14)


def test_the_documented_auto_lengths_are_the_rule_at_the_schema_default() -> None:
    """docs/analyses/geometry.md, the one place that lists the auto lengths, states each with
    the d_model it comes from; every pair must be :func:`long_context_seq_len` at the schema's
    ``points_per_dim``, and the paper's 4,096 must be its 7-8B models' width (their kept
    configs)."""
    import re
    from pathlib import Path

    from sinkscope.config import load_config, long_context_seq_len
    from sinkscope.config_schema import schema_default
    from sinkscope.sizing.shapes import model_facts

    repo = Path(__file__).resolve().parents[2]
    text = " ".join((repo / "docs" / "analyses" / "geometry.md").read_text().split())
    per_dim = schema_default("geometry", "long_context")["points_per_dim"]
    stated = re.findall(r"([\d,]+) (?:tokens )?(?:for [\w ]+ )?at d_model = ([\d,]+)", text)
    assert len(stated) == 3, stated
    for tokens, width in stated:
        n, d = int(tokens.replace(",", "")), int(width.replace(",", ""))
        assert long_context_seq_len("auto", per_dim, d, None) == n, (tokens, width)
    paper = load_config(repo / "config" / "paper.yaml")
    widths = {model_facts(paper, m, results="/nonexistent").d_model for m in paper["models"]}
    assert 4096 in widths and int(stated[-1][1].replace(",", "")) == 4096
