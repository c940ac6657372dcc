"""Questions of chapter 10, "2D weight-stationary sharding" (exercises/08_many_chips.py).

Worked problem 7 of the scaling book: the split X · YZ = n that minimises the MLP block's
communication, the chip count past which 2D beats 1D (72 by the problem's own formula; the
problem prints 81), how much less 2D sends at 256 chips, and the algorithm itself as a
`shard_map` body on the emulated 2 × 4 mesh, checked against the unsharded block.
References come from `comm_time` and from plain single-device JAX.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`).
"""

from __future__ import annotations

import numpy as np

from ..compare import allclose
from ..questions import Function, Mistake, Numeric

D_MODEL = 8192
F_MODEL = 4 * D_MODEL
N_CHIPS = 256
# The coding exercise's shapes: tiny, so the sharded program compiles in about a second.
B_X, D_X, F_X = 4, 32, 64


def _optimal_x() -> float:
    from inferbook.perf import comm_time
    return comm_time.ws2d_optimal_x(N_CHIPS, D_MODEL, F_MODEL)


def _crossover() -> float:
    from inferbook.perf import comm_time
    return comm_time.ws2d_crossover_chips(D_MODEL, F_MODEL)


def _gain() -> float:
    """T_1D / T_2D at the best integer split (per unit of B, bytes and bandwidth)."""
    from inferbook.perf import comm_time
    X, YZ = comm_time.ws2d_best_split(N_CHIPS, D_MODEL, F_MODEL)
    t1 = comm_time.ws1d_comm_time(1, D_MODEL, 1.0, axes=3)
    return t1 / comm_time.ws2d_comm_time(1, D_MODEL, F_MODEL, X, YZ, 1.0)


# The coding exercise -----------------------------------------------------------------------

def _mlp_cases(rng):
    import jax.numpy as jnp
    cases = []
    for _ in range(3):              # one shape: one compilation
        x = rng.standard_normal((B_X, D_X)).astype(np.float32)
        w_in = (rng.standard_normal((D_X, F_X)) / np.sqrt(D_X)).astype(np.float32)
        w_out = (rng.standard_normal((F_X, D_X)) / np.sqrt(F_X)).astype(np.float32)
        cases.append((jnp.asarray(x), jnp.asarray(w_in), jnp.asarray(w_out)))
    return cases


def _mlp_reference(x_BD, w_in_DF, w_out_FD):
    """The block on one device: gelu(x @ W_in) @ W_out."""
    import jax
    return jax.nn.gelu(x_BD @ w_in_DF) @ w_out_FD


QUESTIONS = [
    Numeric("ch10.optimal_x", "The best X for 256 chips (F = 4D)", 1,
            "T(X) = 2BD/(X·W) + 4BF/(YZ·W) with YZ = n/X; set dT/dX = 0: X = sqrt(n·D / (2F))",
            reference=_optimal_x, rel_tol=0.01,
            mistakes=[Mistake(lambda r: N_CHIPS / r, "that is YZ = n / X, the other factor "
                              "of the split")]),
    Numeric("ch10.crossover_chips", "Chips past which 2D moves less than 1D", 2,
            "1D costs 4BD/(3W); 2D at its best X costs 2·sqrt(2BD · 4BF / n) / W (the minimum "
            "of a/X + b·X is 2·sqrt(ab)); set them equal and solve for n",
            reference=_crossover, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r * 81 / 72, "81 is the figure printed in worked "
                              "problem 7, but its own expression 128·(3/4)² is 72")]),
    Numeric("ch10.gain_at_256", "T_1D / T_2D at 256 chips", 1,
            "use the integer split X · YZ = 256 (X a power of two) with the least 2D time; "
            "1D is 4BD/(3W); 2D is 2BD/(X·W) + 4BF/(YZ·W)",
            reference=_gain, rel_tol=0.01),
    Function("ch10.ws2d_mlp", "The 2D weight-stationary MLP block with shard_map", 4,
             "in the body: AllGather x over 'y' (axis 1, tiled) to get [B, D_X]; multiply by "
             "W_in and psum over 'x' (each device saw only its D_X slice); gelu; multiply by "
             "W_out; psum_scatter over 'y' along axis 1 (tiled) to get [B, D_XY]",
             library_answers=("inferbook.parallel.weight_stationary.mlp_2d",),
             reference=_mlp_reference, cases=_mlp_cases, compare=allclose(1e-4, 1e-5),
             time_limit_s=30.0),
]

ZH = {
    # titles
    "The best X for 256 chips (F = 4D)": "256 个芯片时最优的 X（F = 4D）",
    "Chips past which 2D moves less than 1D": "芯片数超过多少时，二维搬运的数据比一维少",
    "T_1D / T_2D at 256 chips": "256 个芯片时的 T_1D / T_2D",
    "The 2D weight-stationary MLP block with shard_map": "用 shard_map 写二维权重驻留的 MLP 块",
    # hints
    "T(X) = 2BD/(X·W) + 4BF/(YZ·W) with YZ = n/X; set dT/dX = 0: X = sqrt(n·D / (2F))":
        "T(X) = 2BD/(X·W) + 4BF/(YZ·W)，其中 YZ = n/X；令 dT/dX = 0：X = sqrt(n·D / (2F))",
    "1D costs 4BD/(3W); 2D at its best X costs 2·sqrt(2BD · 4BF / n) / W (the minimum of "
    "a/X + b·X is 2·sqrt(ab)); set them equal and solve for n":
        "一维的代价是 4BD/(3W)；二维在最优 X 处的代价是 2·sqrt(2BD · 4BF / n) / W"
        "（a/X + b·X 的最小值是 2·sqrt(ab)）；令两者相等，解出 n",
    "use the integer split X · YZ = 256 (X a power of two) with the least 2D time; 1D is "
    "4BD/(3W); 2D is 2BD/(X·W) + 4BF/(YZ·W)":
        "取二维时间最少的整数切分 X · YZ = 256（X 为 2 的幂）；一维是 4BD/(3W)；二维是 "
        "2BD/(X·W) + 4BF/(YZ·W)",
    "in the body: AllGather x over 'y' (axis 1, tiled) to get [B, D_X]; multiply by W_in and "
    "psum over 'x' (each device saw only its D_X slice); gelu; multiply by W_out; psum_scatter "
    "over 'y' along axis 1 (tiled) to get [B, D_XY]":
        "在函数体中：在 'y' 上对 x 做全收集（axis 1，tiled），得到 [B, D_X]；乘以 W_in，再在 'x' "
        "上做 psum（每个设备只看到了它自己的 D_X 片）；gelu；乘以 W_out；在 'y' 上沿 axis 1 做 "
        "psum_scatter（tiled），得到 [B, D_XY]",
    # known mistakes
    "that is YZ = n / X, the other factor of the split": "这是 YZ = n / X，切分的另一个因子",
    "81 is the figure printed in worked problem 7, but its own expression 128·(3/4)² is 72":
        "81 是例题 7 中印出的数字，但它自己的表达式 128·(3/4)² 等于 72",
}
