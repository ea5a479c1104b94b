"""Oversmoothing analysis (paper §5, Theorem 5.1, App. E.1): closed forms and file analysis.

Independent checks:
* ``u`` (eq. 12) and ``rho`` (§3) on matrices with known values;
* Theorem 5.1's expectations (eq. 2) against Monte Carlo sampling of ``Z_i = zbar + eps_i`` with
  chosen ``Sigma_V, Sigma_C``; the moment estimators against the same samples; the factored
  traces against explicit ``D x D`` products; the monotonicity claims (i)/(ii) on ``rho_hat``;
* on tiny random models of each family (fixture ``extracted``): prefix equality with a direct
  forward, and every per-head quantity of :func:`analyze_file` (``s_l``, ``u``, all ``rho``'s,
  the post-norm treatment of Gemma 3) against a recomputation from the model's own modules.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from sinkscope import oversmoothing as ov
from sinkscope.heads import classify_file
from sinkscope.models import decoder_layers

# --------------------------------------------------------------------------- u and rho


def test_uniformity_of_identity_and_uniform_attention() -> None:
    n = 7
    identity = np.eye(n)
    uniform = ov.uniform_causal(n)
    np.testing.assert_allclose(uniform.sum(1), 1.0)
    assert ov.uniformity(identity, include_first_row=False) == 0.0
    assert ov.uniformity(uniform, include_first_row=False) == pytest.approx(1.0, abs=1e-14)
    # eq. (12) literally: the single-entry first row counts as 1
    assert ov.uniformity(uniform) == pytest.approx(1.0, abs=1e-14)
    assert ov.uniformity(identity) == pytest.approx(1.0 / n, abs=1e-15)
    # a half sink, half diagonal row has normalised entropy log 2 / log i
    mixed = 0.5 * (np.eye(n) + np.eye(n)[[0] * n])
    mixed[0, 0] = 1.0
    expected = np.r_[1.0, [np.log(2) / np.log(i) for i in range(2, n + 1)]]
    np.testing.assert_allclose(ov.row_uniformity(mixed).numpy(), expected, atol=1e-14)


def test_average_cosine_similarity_on_constructed_matrices() -> None:
    n, dim = 6, 9
    basis = np.eye(dim)
    assert ov.average_cosine_similarity(basis[:n]) == pytest.approx(0.0, abs=1e-14)
    assert ov.average_cosine_similarity(np.tile(3.0 * basis[0], (n, 1))) == pytest.approx(1.0)
    theta = 0.7  # x_i = cos(theta) e_0 + sin(theta) e_i: pairwise cosine cos^2(theta)
    tokens = np.cos(theta) * basis[0] + np.sin(theta) * basis[1 : n + 1]
    scaled = tokens * np.arange(1, n + 1)[:, None]  # cosines ignore the norms
    assert ov.average_cosine_similarity(scaled) == pytest.approx(np.cos(theta) ** 2, abs=1e-14)
    rng = np.random.default_rng(1)
    batch = rng.normal(size=(3, n, dim))
    brute = [
        np.mean(
            [
                x[i] @ x[j] / np.linalg.norm(x[i]) / np.linalg.norm(x[j])
                for i in range(n)
                for j in range(i + 1, n)
            ]
        )
        for x in batch
    ]
    np.testing.assert_allclose(ov.average_cosine_similarity(batch), brute, atol=1e-14)


# --------------------------------------------------------------------------- Theorem 5.1


def _spd(rng: np.random.Generator, dim: int, scale: float) -> np.ndarray:
    a = rng.normal(size=(dim, dim))
    return scale * (a @ a.T / dim + 0.2 * np.eye(dim))


def _moments(z_bar, sigma_v, sigma_c, beta, n) -> ov.TokenMoments:
    z_bar, sigma_v, sigma_c = (
        torch.as_tensor(a, dtype=torch.float64) for a in (z_bar, sigma_v, sigma_c)
    )
    return ov.TokenMoments(n, 1, z_bar, sigma_v, sigma_c, beta)


def _sample_tokens(rng, z_bar, sigma_b, sigma_c, n_samples, n_tokens) -> np.ndarray:
    """Z_i = zbar + eta + xi_i: Cov(eps_i) = Sigma_C + B = Sigma_V, Cov(eps_i, eps_j) = Sigma_C."""
    dim = z_bar.size
    shared = rng.multivariate_normal(np.zeros(dim), sigma_c, size=n_samples)
    own = rng.multivariate_normal(np.zeros(dim), sigma_b, size=(n_samples, n_tokens))
    return z_bar + shared[:, None, :] + own


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    dim, n_tokens = 5, 6
    z_bar = rng.normal(size=dim)
    sigma_b = _spd(rng, dim, 0.6)  # B = Sigma_V - Sigma_C
    sigma_c = _spd(rng, dim, 0.3)
    z = _sample_tokens(rng, z_bar, sigma_b, sigma_c, 200_000, n_tokens)
    return {
        "rng": rng,
        "z_bar": z_bar,
        "sigma_v": sigma_b + sigma_c,
        "sigma_c": sigma_c,
        "z": z,
        "w": rng.normal(size=(dim, dim)) / np.sqrt(dim),
        "bias_in": rng.normal(size=dim) * 0.3,
        "beta": 0.8,
    }


@pytest.mark.parametrize("lam", [0.0, 0.35, 1.0])
def test_theorem_expectations_match_monte_carlo(synthetic, lam: float) -> None:
    z, w, beta = synthetic["z"], synthetic["w"], synthetic["beta"]
    n = z.shape[1]
    bias = w @ synthetic["bias_in"]  # the update's constant c = w_out @ bias_in
    mixing = (1 - lam) * np.eye(n) + lam * ov.uniform_causal(n)
    y = beta * z + np.einsum("ik,skd,ed->sie", mixing, z, w) + bias  # (samples, n, D)
    products = np.einsum("sid,sjd->sij", y, y)
    empirical = products.mean(0)
    stderr = products.std(0) / np.sqrt(products.shape[0])
    moments = _moments(synthetic["z_bar"], synthetic["sigma_v"], synthetic["sigma_c"], beta, n)
    terms = ov.trace_terms(moments, w[None], np.eye(w.shape[0])[None], synthetic["bias_in"][None])
    coef = {k: v[0] for k, v in ov.closed_form_coefficients(terms, beta).items()}
    expected = ov.theorem_gram(coef, n, lam)
    assert np.all(np.abs(empirical - expected) < 5 * stderr + 1e-12)
    assert np.max(np.abs(empirical - expected) / np.abs(expected)) < 0.02
    # eq. (1): rho_hat is the average of E[Y_i^T Y_j] / sqrt(E||Y_i||^2 E||Y_j||^2)
    d = np.sqrt(np.diag(expected))
    pairs = (expected / np.outer(d, d))[np.triu_indices(n, 1)]
    assert ov.rho_hat(coef, n, lam) == pytest.approx(pairs.mean(), abs=1e-13)


def test_moment_estimators_recover_the_distribution(synthetic) -> None:
    z = synthetic["z"][:40_000]
    x = 2.5 * z  # X = beta Z exactly
    (moments,) = ov.estimate_moments(z, x, [z.shape[1]])
    assert moments.beta == pytest.approx(2.5, abs=1e-12)
    np.testing.assert_allclose(moments.z_bar.numpy(), synthetic["z_bar"], atol=0.02)
    np.testing.assert_allclose(moments.sigma_v.numpy(), synthetic["sigma_v"], atol=0.03)
    np.testing.assert_allclose(moments.sigma_c.numpy(), synthetic["sigma_c"], atol=0.03)
    # prefixes accumulated segment by segment equal a direct estimate on the prefix
    short, full = ov.estimate_moments(z[:500], None, [3, z.shape[1]])
    (direct,) = ov.estimate_moments(z[:500, :3], None, [3])
    for name in ("z_bar", "sigma_v", "sigma_c"):
        np.testing.assert_allclose(getattr(short, name), getattr(direct, name), atol=1e-12)
    # the estimators are the plain sample definitions
    eps = z[:500] - full.z_bar.numpy()
    pairs = np.einsum("sid,sje->ijde", eps, eps) / 500
    off = ~np.eye(z.shape[1], dtype=bool)
    np.testing.assert_allclose(full.sigma_c.numpy(), pairs[off].mean(0), atol=1e-12)
    np.testing.assert_allclose(full.sigma_v.numpy(), pairs[~off].mean(0), atol=1e-12)


def test_factored_traces_equal_explicit_products(synthetic) -> None:
    rng = np.random.default_rng(3)
    dim, k, heads = 5, 2, 3
    w_out, w_in = rng.normal(size=(heads, dim, k)), rng.normal(size=(heads, k, dim))
    bias_in = rng.normal(size=(heads, k))
    moments = _moments(synthetic["z_bar"], synthetic["sigma_v"], synthetic["sigma_c"], 1.0, 4)
    terms = ov.trace_terms(moments, w_out, w_in, bias_in)
    zb = synthetic["z_bar"]
    b = synthetic["sigma_v"] - synthetic["sigma_c"]
    c = np.outer(zb, zb) + synthetic["sigma_c"]
    for h in range(heads):
        w = w_out[h] @ w_in[h]
        bias = w_out[h] @ bias_in[h]
        assert terms.tr_bw[h] == pytest.approx(np.trace(b @ w))
        assert terms.tr_cw[h] == pytest.approx(np.trace(c @ w))
        assert terms.tr_bwtw[h] == pytest.approx(np.trace(b @ w.T @ w))
        assert terms.tr_cwtw[h] == pytest.approx(np.trace(c @ w.T @ w))
        assert terms.c_z[h] == pytest.approx(bias @ zb)
        assert terms.c_wz[h] == pytest.approx(bias @ w @ zb)
        assert terms.c_c[h] == pytest.approx(bias @ bias)
    assert terms.tr_c == pytest.approx(np.trace(c))
    assert terms.tr_b == pytest.approx(np.trace(b))


def test_conditions_give_the_predicted_monotonicity(synthetic) -> None:
    dim, n = synthetic["z_bar"].size, 64
    beta = 1.0
    moments = _moments(synthetic["z_bar"], synthetic["sigma_v"], synthetic["sigma_c"], beta, n)
    eye = np.eye(dim)
    maps = np.stack([0.5 * eye, -0.5 * eye, -1.5 * eye])  # (i); (ii); neither (0.5 * 1.5 > 0)
    terms = ov.trace_terms(moments, maps, np.stack([eye] * 3))
    coef = ov.closed_form_coefficients(terms, beta)
    labels = ov.condition_labels(coef["beta_tr_bw"], coef["e"])
    assert labels.tolist() == ["i", "ii", "neither"]
    assert np.all(coef["a"] + np.minimum(coef["b"], 0) / 2 > 0)  # E[Y_i^T Y_j] > 0
    path = ov.rho_hat(coef, n, ov.LAMBDA_GRID)
    assert np.all(np.diff(path[0]) > 0)
    assert np.all(np.diff(path[1]) < 0)


# --------------------------------------------------------------------------- real files


def _forward_with_hooks(model, ids: np.ndarray, family: str) -> dict[str, list]:
    """hidden states, attentions, and per layer: value vectors, o_proj input/output, update."""
    layers = decoder_layers(model)
    caught: dict[str, list] = {"v": [None] * len(layers), "o_in": [None] * len(layers)}
    caught["o_out"] = [None] * len(layers)
    handles = []
    for index, layer in enumerate(layers):
        attn = layer.attn if family == "gpt2" else layer.self_attn
        out_proj = attn.c_proj if family == "gpt2" else attn.o_proj
        v_mod = attn.c_attn if family == "gpt2" else attn.v_proj

        def keep_v(_m, _i, out, index=index):
            caught["v"][index] = out.detach()

        def keep_o(_m, inputs, out, index=index):
            caught["o_in"][index] = inputs[0].detach()
            caught["o_out"][index] = out.detach()

        handles += [v_mod.register_forward_hook(keep_v), out_proj.register_forward_hook(keep_o)]
    try:
        with torch.no_grad():
            out = model(
                torch.as_tensor(ids, dtype=torch.long),
                output_hidden_states=True,
                output_attentions=True,
            )
    finally:
        for handle in handles:
            handle.remove()
    caught["hidden"] = [h.numpy().astype(np.float64) for h in out.hidden_states]
    caught["attn"] = [a.numpy().astype(np.float64) for a in out.attentions]
    return caught


def test_prefix_run_equals_stored_prefix(extracted) -> None:
    family, path, model, ids = extracted
    t = 9
    full = _forward_with_hooks(model, ids, family)
    short = _forward_with_hooks(model, ids[:, : t + 1], family)
    for layer in range(len(full["attn"])):
        np.testing.assert_allclose(
            short["hidden"][layer], full["hidden"][layer][:, : t + 1], rtol=1e-5, atol=1e-5
        )
        block = full["attn"][layer][:, :, : t + 1, : t + 1]
        np.testing.assert_allclose(short["attn"][layer], block, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(block.sum(-1), 1.0, atol=1e-6)  # rows already normalised
    from sinkscope.h5layout import open_activations

    with open_activations(path) as f:  # the stored prefix is the t-token run
        np.testing.assert_allclose(
            f["residual/X"][1, :, : t + 1], short["hidden"][1], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            f["attention/probs"][1, :, :, : t + 1, : t + 1], short["attn"][1], atol=1e-6
        )


def _direct_reference(family: str, model, ids, lengths: list[int]) -> dict[tuple, dict]:
    """Every per-head quantity recomputed from the model's modules (BOS not in the token set)."""
    caught = _forward_with_hooks(model, ids, family)
    cfg = model.config
    n_heads = cfg.num_attention_heads if family != "gpt2" else cfg.n_head
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    layers = decoder_layers(model)
    out: dict[tuple, dict] = {}
    for index, layer in enumerate(layers):
        x = caught["hidden"][index]
        o_in = caught["o_in"][index].numpy().astype(np.float64)  # (N, P, H * hd)
        o_out = caught["o_out"][index].numpy().astype(np.float64)
        n_seq, n_pos, _ = o_in.shape
        hd = o_in.shape[-1] // n_heads
        o_heads = o_in.reshape(n_seq, n_pos, n_heads, hd)
        if family == "gpt2":
            w_o = layer.attn.c_proj.weight.detach().numpy().T.astype(np.float64)  # (D, H hd)
            values = caught["v"][index].numpy()[..., 2 * x.shape[-1] :].astype(np.float64)
            values = values.reshape(n_seq, n_pos, n_heads, hd)
        else:
            w_o = layer.self_attn.o_proj.weight.detach().numpy().astype(np.float64)
            values = caught["v"][index].numpy().astype(np.float64)
            values = values.reshape(n_seq, n_pos, n_kv, hd)[
                :, :, np.arange(n_heads) // (n_heads // n_kv)
            ]
        w_o_heads = w_o.reshape(-1, n_heads, hd)
        per_head = np.einsum("dhk,nphk->nhpd", w_o_heads, o_heads)
        out_bias = o_out - per_head.sum(1)
        if family == "gpt2":  # the output-projection bias is no head's contribution
            np.testing.assert_allclose(
                out_bias,
                np.broadcast_to(layer.attn.c_proj.bias.detach().numpy(), out_bias.shape),
                atol=1e-5,
            )
        else:  # sum over heads of the per-head updates is the o_proj output
            np.testing.assert_allclose(out_bias, 0.0, atol=1e-5)
        if family == "gemma3":
            norm = layer.post_attention_layernorm
            with torch.no_grad():
                update = norm(torch.as_tensor(o_out, dtype=torch.float32)).numpy().astype(float)
                gamma = norm(torch.ones(1, x.shape[-1])).numpy()[0].astype(np.float64)
            r = np.sqrt((o_out**2).mean(-1) + ov.POST_NORM_EPS)  # (N, P)
            exact = gamma * per_head / r[:, None, :, None]
            np.testing.assert_allclose(exact.sum(1), update, rtol=1e-4, atol=1e-5)
        else:
            update = o_out
            gamma, r = np.ones(x.shape[-1]), None

        def contribution(o, gamma=gamma, w_o_heads=w_o_heads):  # head dim -> residual space
            return gamma * np.einsum("dhk,nhpk->nhpd", w_o_heads, o)

        o_attn = o_heads.transpose(0, 2, 1, 3)
        o_id = values.transpose(0, 2, 1, 3)
        text = o_id[:, :, 1:]
        o_unif = np.concatenate(
            [o_id[:, :, :1], np.cumsum(text, 2) / np.arange(1, text.shape[2] + 1)[:, None]], 2
        )
        probs = caught["attn"][index]
        ent = -np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1)), 0).sum(-1)
        for t in lengths:
            sl = slice(1, t + 1)
            kappa = 1.0 if r is None else 1.0 / r[:, sl].mean()
            heads = {
                k: kappa * contribution(o)[:, :, sl]
                for k, o in (("id", o_id), ("attn", o_attn), ("unif", o_unif))
            }
            head_norm = np.linalg.norm(heads["attn"], axis=-1).mean()
            s_l = np.linalg.norm(update[:, sl], axis=-1).mean() / head_norm
            xs = x[:, sl]
            for h in range(n_heads):
                row = {"s_l": s_l, "rho_x": ov.average_cosine_similarity(xs).mean()}
                for name, tag in (("id", "xwz"), ("attn", "xwza"), ("unif", "xwzau")):
                    upd = heads[name][:, h]
                    row[f"rho_{tag}"] = ov.average_cosine_similarity(xs + upd).mean()
                    row[f"rho_{tag}_s"] = ov.average_cosine_similarity(xs + s_l * upd).mean()
                u = ent[:, h, sl] / np.log(np.arange(2, t + 2))
                row["uniformity"] = u.mean()
                row["rho_after"] = ov.average_cosine_similarity(xs + update[:, sl]).mean()
                out[(index, h, t)] = row
    return out


def test_analysis_matches_a_recomputation_from_the_model(extracted) -> None:
    family, path, model, ids = extracted
    lengths = [5, 12, 20]
    _, per_head = classify_file(path)
    tables = ov.analyze_file(path, per_head, context_lengths=lengths + [99])
    heads = tables["per_head"]
    assert sorted(set(heads["context_length"].to_list())) == lengths  # 99 capped at T = 20
    reference = _direct_reference(family, model, ids, lengths)
    assert heads.height == len(reference)
    columns = ["s_l", "rho_x", "uniformity"] + [
        f"rho_{tag}{s}" for tag in ("xwz", "xwza", "xwzau") for s in ("", "_s")
    ]
    for row in heads.iter_rows(named=True):
        ref = reference[(row["layer"], row["head"], row["context_length"])]
        for column in columns:
            assert row[column] == pytest.approx(ref[column], rel=1e-4, abs=2e-5), column
    for row in tables["per_layer"].iter_rows(named=True):
        ref = reference[(row["layer"], 0, row["context_length"])]
        assert row["rho_after"] == pytest.approx(ref["rho_after"], rel=1e-4, abs=2e-5)
        assert row["probs_upper_max"] == 0.0
        assert row["head_sum_rel_err"] < 1e-4
        if family == "gemma3":  # the post-norm gain is recovered from the stored tensors
            assert row["post_norm_fit_rel_err"] < 1e-4
        else:
            assert np.isnan(row["post_norm_fit_rel_err"])
    # the closed form of X equals tr C / tr(B + C) and signs/conditions are consistent
    assert (heads["abs_err_x"] < 1e-3).all() or family == "gpt2"
    cond = heads.select("condition", "cond_i_value", "cond_ii_value").to_dict(as_series=False)
    for label, first, second in zip(*cond.values(), strict=True):
        assert label == ("i" if first > 0 else "ii" if second < 0 else "neither")
    assert set(tables) == {"per_head", "per_layer", "summary", "conditions", "claims"}
    assert tables["summary"].height == len(lengths)


def test_gemma_post_norm_gain_is_recovered(extracted) -> None:
    family, path, model, ids = extracted
    if family != "gemma3":
        pytest.skip("post-attention norm only in Gemma 3")
    caught = _forward_with_hooks(model, ids, family)
    from sinkscope.h5layout import open_activations

    with open_activations(path) as f:
        for index, layer in enumerate(decoder_layers(model)):
            update = torch.as_tensor(f["attention/residual_update"][index])
            o_out = caught["o_out"][index]
            gamma, r, err = ov.fit_post_norm_gain(update, o_out)
            with torch.no_grad():
                truth = layer.post_attention_layernorm(torch.ones(1, o_out.shape[-1]))[0]
            np.testing.assert_allclose(gamma.numpy(), truth.numpy(), rtol=1e-4, atol=1e-5)
            assert err < 1e-5
            expected_r = torch.sqrt((o_out.double() ** 2).mean(-1) + ov.POST_NORM_EPS)
            np.testing.assert_allclose(r.numpy(), expected_r.numpy(), rtol=1e-12)


def test_include_bos_and_summaries(extracted, tmp_path: Path) -> None:
    family, path, _, _ = extracted
    if family != "llama":
        pytest.skip("one family suffices")
    _, per_head = classify_file(path)
    with_bos = ov.analyze_file(path, per_head, [8], include_bos=True)
    without = ov.analyze_file(path, per_head, [8])
    assert with_bos["per_head"]["n_tokens"].unique().to_list() == [9]
    assert without["per_head"]["n_tokens"].unique().to_list() == [8]
    from sinkscope.h5layout import open_activations

    with open_activations(path) as f:
        x = f["residual/X"][0, :, :9]
    rho = with_bos["per_layer"].filter(pl.col("layer") == 0)["rho_before"].item()
    assert rho == pytest.approx(ov.average_cosine_similarity(x).mean(), abs=1e-6)
    other = {k: v.with_columns(dataset=pl.lit("other")) for k, v in without.items()}
    combined = ov.summarize([without, other])
    summary = combined["summary"]
    assert summary["dataset"].to_list() == ["other", "random", "all"]
    pooled = summary.filter(pl.col("dataset") == "all")
    assert pooled["n_heads"].item() == 2 * without["summary"]["n_heads"].item()
    assert pooled["mean_rho_x"].item() == pytest.approx(without["summary"]["mean_rho_x"].item())
    assert set(combined["claims"]["dataset"].unique()) == {"random", "other", "all"}
    with pytest.raises(ValueError, match="twice"):
        ov.summarize([without, without])
    from sinkscope import oversmoothing_plots as plots

    written = plots.plot_all(combined, tmp_path / "figs")
    assert written and all(p.exists() and p.stat().st_size > 0 for p in written)
