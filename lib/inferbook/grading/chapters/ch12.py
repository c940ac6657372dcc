"""Questions of chapter 12, "Paged KV memory and prefix caching" (exercises/11_serving.py).

Blocks a batch of sequences needs, the memory paging wastes inside its last blocks against
what a contiguous reservation wastes, and two functions: the block-table lookup from a
token's logical position to its physical slot in the pool, and the prefix-cache match (how
many tokens of a new prompt are already cached, in whole blocks). References come from the
library: `serving.block_manager`, `paged.gather_blocks` and `serving.prefix_cache`.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

import numpy as np

from ..compare import allclose
from ..localize import question_text
from ..questions import Exact, Function, Mistake, Numeric

LENGTHS = (37, 512, 129, 16, 1000, 250, 3, 64)     # tokens held by each sequence
BLOCK, MAX_LEN = 16, 2048


def _blocks() -> int:
    from inferbook.memory.kv_usage import blocks_for
    return sum(blocks_for(n, BLOCK) for n in LENGTHS)


def _paged_waste() -> float:
    from inferbook.memory.kv_usage import paged_usage
    return paged_usage(LENGTHS, BLOCK).waste


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch12.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch12.{question}", template).format(**values)


def _contiguous_waste() -> float:
    from inferbook.memory.kv_usage import contiguous_usage
    return contiguous_usage(LENGTHS, MAX_LEN).waste


# The block-table lookup ------------------------------------------------------------------

def _slot_cases(rng):
    import jax.numpy as jnp
    cases = []
    for n_blocks, C, B, J, T in [(12, 4, 3, 4, 5), (12, 4, 3, 4, 5), (6, 2, 2, 3, 6),
                                 (20, 8, 1, 2, 3)]:
        table = rng.permutation(n_blocks)[:B * J].reshape(B, J).astype(np.int32)
        pos = rng.integers(0, J * C, (B, T)).astype(np.int32)
        cases.append((jnp.asarray(table), jnp.asarray(pos), C))
    return cases


def _slot_reference(block_table_BJ, pos_BT, block_size):
    """Fill a pool with each slot's own index, gather it through the table, read positions.

    (gather_blocks only indexes and reshapes, so it runs on NumPy arrays as well: no
    compilation per shape.)"""
    from inferbook.kernels.paged import gather_blocks
    table = np.asarray(block_table_BJ)
    n_blocks = int(table.max()) + 1
    pool = np.arange(n_blocks * block_size, dtype=np.int32).reshape(n_blocks, 1, block_size, 1)
    slots_BS = gather_blocks(pool, table)[:, 0, :, 0]                   # [B, J·C]
    return np.take_along_axis(slots_BS, np.asarray(pos_BT), axis=1)


def _describe_slot(args):
    table, pos, C = args
    return _say("physical_slot", "block_size={C}, table {table}, positions {pos}", C=C,
                table=np.asarray(table).tolist(), pos=np.asarray(pos).tolist())


# The prefix-cache match ------------------------------------------------------------------

def _match_cases(rng):
    cases = []
    for bs, n_cached in [(4, 3), (4, 3), (2, 4), (8, 2), (4, 0)]:
        base = [int(t) for t in rng.integers(0, 5, 40)]
        cached = []
        for _ in range(n_cached):           # prompts that share a prefix with each other
            cut = int(rng.integers(0, 30))
            tail = [int(t) for t in rng.integers(0, 5, int(rng.integers(0, 15)))]
            cached.append(base[:cut] + tail)
        cut = int(rng.integers(8, 36))
        prompt = base[:cut] + [int(t) for t in rng.integers(0, 5, int(rng.integers(1, 10)))]
        cases.append((cached, prompt, bs))
    cases.append((cases[1][0], list(cases[1][0][0]), 4))    # a prompt seen before, whole
    return cases


def _match_reference(cached_prompts, prompt, block_size):
    """Insert the cached prompts into the library's hash-chain cache; ask it about `prompt`."""
    from inferbook.serving import BlockManager, HashChainCache
    bm = BlockManager(1000, block_size)
    cache = HashChainCache(bm)
    for p in cached_prompts:
        table: list[int] = []
        bm.grow(table, len(p))
        cache.insert(p, table)
        bm.release(table)               # the request ends; the cache keeps its full blocks
    return cache.peek(prompt)


def _describe_match(args):
    cached, prompt, bs = args
    return _say("prefix_match", "block_size={bs}, {n} cached prompts, a prompt of {tokens} tokens",
                bs=bs, n=len(cached), tokens=len(prompt))


QUESTIONS = [
    Exact("ch12.blocks_needed", "Blocks the eight sequences occupy", 1,
          "each sequence takes ceil(length / block_size) blocks of its own",
          reference=_blocks),
    Numeric("ch12.paged_waste", "Share of the paged reservation that holds nothing", 1,
            "reserved = blocks × block_size token slots; waste = 1 − tokens / reserved",
            reference=_paged_waste, rel_tol=0.01, abs_tol=1e-4),
    Numeric("ch12.contiguous_waste", "... and of a contiguous reservation of 2,048 each", 1,
            "every sequence reserves max_len slots up front: waste = 1 − tokens / (B·max_len)",
            reference=_contiguous_waste, rel_tol=0.01,
            mistakes=[Mistake(lambda r: 1 - r, "that is the share in use; the question asks "
                              "for the share wasted")]),
    Function("ch12.physical_slot", "Logical position → physical slot", 3,
             "position p of sequence b sits in block table[b, p // block_size] at offset "
             "p % block_size; number the pool's slots block by block: block · block_size + "
             "offset",
             reference=_slot_reference, cases=_slot_cases, compare=allclose(0, 0),
             describe_case=_describe_slot),
    Function("ch12.prefix_match", "Tokens of a prompt found in the prefix cache", 3,
             "only full blocks are cached, and block i matches only if blocks 0 … i match "
             "too; for each cached prompt count the leading blocks of block_size tokens that "
             "are equal in both (and full in both), take the best, and return it in tokens",
             library_answers=("inferbook.serving.hash_chain_cache.HashChainCache",
                              "inferbook.serving.radix_cache.RadixCache"),
             reference=_match_reference, cases=_match_cases, compare=allclose(0, 0),
             describe_case=_describe_match),
]

ZH = {
    # titles
    "Blocks the eight sequences occupy": "八个序列占用的块数",
    "Share of the paged reservation that holds nothing": "分页预留中空着的比例",
    "... and of a contiguous reservation of 2,048 each":
        "……以及每个序列连续预留 2,048 个词元时空着的比例",
    "Logical position → physical slot": "逻辑位置 → 物理槽位",
    "Tokens of a prompt found in the prefix cache": "提示词中能在前缀缓存里找到的词元数",
    # hints
    "each sequence takes ceil(length / block_size) blocks of its own":
        "每个序列各自占用 ceil(length / block_size) 个块",
    "reserved = blocks × block_size token slots; waste = 1 − tokens / reserved":
        "预留量 reserved = 块数 × block_size 个词元槽位；浪费 waste = 1 − 词元数 / reserved",
    "every sequence reserves max_len slots up front: waste = 1 − tokens / (B·max_len)":
        "每个序列都预先预留 max_len 个槽位：waste = 1 − 词元数 / (B·max_len)",
    "position p of sequence b sits in block table[b, p // block_size] at offset "
    "p % block_size; number the pool's slots block by block: block · block_size + offset":
        "序列 b 的位置 p 位于块 table[b, p // block_size] 中偏移 p % block_size 处；块池的槽位"
        "按块依次编号：block · block_size + offset",
    "only full blocks are cached, and block i matches only if blocks 0 … i match too; for each "
    "cached prompt count the leading blocks of block_size tokens that are equal in both (and "
    "full in both), take the best, and return it in tokens":
        "只有满块才会被缓存，而且只有块 0 … i 全都匹配时，块 i 才算匹配；对每个已缓存的提示词，"
        "从开头数起，数出在两者中都相等（并且在两者中都是满的）、每块 block_size 个词元的块，"
        "取最多的那个，并以词元数返回",
    # known mistakes
    "that is the share in use; the question asks for the share wasted":
        "这是在用的比例；题目问的是浪费的比例",
    # messages of the checks
    "block_size={C}, table {table}, positions {pos}": "block_size={C}，块表 {table}，位置 {pos}",
    "block_size={bs}, {n} cached prompts, a prompt of {tokens} tokens":
        "block_size={bs}，{n} 个已缓存的提示词，一个 {tokens} 个词元的提示词",
}
