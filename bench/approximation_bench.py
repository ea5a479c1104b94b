"""The per-sequence terms of eq. (2) timed against the moments they stand beside.

    .venv/bin/python bench/approximation_bench.py [--widths llama gpt2-xl] [--sequences 4]

For one layer at a paper model's widths (random tokens and maps, T' = 256 tokens per
sequence), times :func:`sinkscope.oversmoothing.approximation.sequence_terms` (the coefficients
that give ``approximation_every_head`` its interval over sequences) and, as the baseline
measured in the same run on the same threads, :class:`sinkscope.oversmoothing.moments.
MomentAccumulator`'s ``add`` of the same sequences (the float64 ``D x D`` Gram matrices that
every oversmoothing job already computes). The ratio is what the terms add to the moments'
part of the job; the size of the terms' own work arrays is printed beside it. The job computes
the terms of every prefix T' of ``oversmoothing.context_lengths`` in the same pass over the
tokens: the last column times that call against the single-T' one.
"""

from __future__ import annotations

import argparse
import time

import torch

from sinkscope.oversmoothing.analysis import DEFAULT_CONTEXT_LENGTHS
from sinkscope.oversmoothing.approximation import HeadMaps, sequence_terms
from sinkscope.oversmoothing.moments import MomentAccumulator
from sinkscope.sizing.usage import cpu_model

#: (d_model, query heads, key/value heads, head dim) of the paper's widths
WIDTHS: dict[str, tuple[int, int, int, int]] = {
    "llama": (4096, 32, 8, 128),  # Llama-3.1-8B, Mistral-7B
    "gemma-7b": (3072, 16, 16, 256),
    "gpt2-xl": (1600, 25, 25, 64),
    "smollm2": (576, 9, 3, 64),
}


def best_of(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def time_layer(
    widths: tuple[int, int, int, int], n_seq: int, tokens: int, repeats: int, gen: torch.Generator
) -> tuple[float, float, float]:
    """Best-of-``repeats`` seconds of the terms (at ``tokens``, and at every prefix of the
    schema's context lengths up to it) and of the moments for one layer's sequences."""
    dim, heads, kv, k = widths
    z = torch.randn(n_seq, tokens, dim, generator=gen) + 0.3
    x = z * 2.0
    w_in = torch.randn(kv, k, dim, generator=gen, dtype=torch.float64) / dim**0.5
    in_heads = torch.arange(heads) // (heads // kv)
    w_out = torch.randn(heads, dim, k, generator=gen, dtype=torch.float64) / k**0.5
    b_v = torch.randn(heads, k, generator=gen, dtype=torch.float64)

    def moments() -> None:
        MomentAccumulator([tokens], dim, n_seq).add(z, x)

    maps = HeadMaps.from_weights(w_in, in_heads, w_out, b_v)  # once per layer in the job
    t_terms = best_of(repeats, lambda: sequence_terms(z, maps, 1.0))
    prefixes = [n for n in DEFAULT_CONTEXT_LENGTHS if n < tokens] + [tokens]
    t_prefixes = best_of(repeats, lambda: sequence_terms(z, maps, 1.0, prefixes))
    return t_terms, best_of(repeats, moments), t_prefixes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", nargs="+", default=["llama", "gpt2-xl"], choices=WIDTHS)
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, torch threads {torch.get_num_threads()}")
    print(
        "| widths | terms s | moments s | terms / moments | terms' work arrays MB "
        "| every T' / one T' | GMAC/s (every T') |"
    )
    print("|---|---|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for name in args.widths:
        t_terms, t_moments, t_prefixes = time_layer(
            WIDTHS[name], args.sequences, args.tokens, args.repeats, gen
        )
        dim, heads, kv, k = WIDTHS[name]
        # each token through the kv value maps and the heads' W_O^T (sizing.requests' count)
        gmacs = args.sequences * args.tokens * (kv + heads) * k * dim / 1e9
        # one sequence's projections: u (G k) and v (H k) in float32, their products and u in
        # float64, per token
        work = args.tokens * (kv * k * 12 + heads * k * 12) / 2**20
        print(
            f"| {name} (d {dim}, {heads} heads) | {t_terms:.2f} | {t_moments:.2f} | "
            f"{t_terms / t_moments:.2f} | {work:.0f} | {t_prefixes / t_terms:.2f} | "
            f"{gmacs / t_prefixes:.0f} |"
        )


if __name__ == "__main__":
    main()
