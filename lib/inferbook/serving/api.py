"""The engine interface: what a model must offer to be served, in JetStream's vocabulary.

A server juggles many requests at different stages; the model underneath only needs to do
three things, each a compiled program with fixed shapes:

  * ``prefill(params, tokens) -> (prefix, first_token)``: run a prompt through the model at
    batch 1 and return its KV cache (the *prefix*) and the first generated token. Expensive and
    compute-bound; its cost grows with the prompt.
  * ``insert(prefix, decode_state, slot) -> decode_state``: copy that prefix into row `slot` of
    the batch the generate loop works on. Cheap: a memory copy.
  * ``generate(params, decode_state) -> (decode_state, tokens)``: one decode step for every
    slot at once — one new token per slot, each slot's KV cache one entry longer. Bound by
    memory bandwidth, so a full batch of slots costs barely more than one.

Everything else — which request goes into which slot when, what to do when one finishes,
whether prefill and generate share a chip — is the orchestrator's business (`scheduler.py`).
Keeping the model behind this narrow interface is what lets one orchestrator drive the real
transformer (`ModelEngine`) and a toy whose every output can be worked out on paper
(`MockEngine`), and lets prefill and generate run on different machines: the prefix is the
unit that travels between them (JetStream's "transfer thread"; disaggregated serving).

Conventions of this library's engines:

  * A slot holds at most `max_len` tokens (prompt plus output); there are
    `max_concurrent_decodes` slots.
  * Sampling is deterministic per request: a request brings the raw PRNG key data of each of
    its steps (``request.step_keys``); the token of step i is drawn with row i. That is the
    convention of `decode.generate`, so an engine's output for a request equals that request
    run alone.
  * `prefill` may continue an `existing_prefix` (JetStream's argument of that name): chunked
    prefill feeds a long prompt in pieces, and a prefix-cache hit starts from cached KV.
  * For prefix caching the engine also moves KV between prefixes or slots and a *block pool*
    (`save_blocks`, `load_prefix`); the block manager decides which blocks, the engine copies.
"""

from __future__ import annotations

import abc
from typing import Any, Sequence

import numpy as np

__all__ = ["Engine", "Prefix", "DecodeState", "Params", "Pool"]

Params = Any        # the model's weights (JetStream passes them to every call, so can we)
Prefix = Any        # the result of a prefill: a batch-1 KV cache plus what insert needs
DecodeState = Any   # the batch of slots the generate loop transforms
Pool = Any          # KV blocks kept for the prefix cache


class Engine(abc.ABC):
    """The computational core a serving loop drives. Subclasses implement the model side."""

    #: slots in the generate batch (JetStream: max_concurrent_decodes)
    max_concurrent_decodes: int
    #: tokens a slot can hold: prompt plus generated
    max_len: int
    #: token ids are in [0, vocab_size); the orchestrators refuse others (None: not checked)
    vocab_size: int | None = None

    # The three calls ------------------------------------------------------------------------

    @abc.abstractmethod
    def prefill(self, params: Params, tokens: Sequence[int], *,
                existing_prefix: Prefix | None = None, keys: np.ndarray | None = None,
                step: int = 0) -> tuple[Prefix, int]:
        """Process `tokens` (appended to `existing_prefix`, if given) and sample the next token.

        `keys` [n, 2] are the request's per-step PRNG key data; the token is drawn with
        keys[step]. Returns the prefix (KV of everything processed so far) and that token.
        """

    @abc.abstractmethod
    def insert(self, prefix: Prefix, decode_state: DecodeState, slot: int) -> DecodeState:
        """Place `prefix` in `slot` of the generate batch; the slot's next input is the token
        `prefill` returned. The slot must be free."""

    @abc.abstractmethod
    def generate(self, params: Params, decode_state: DecodeState
                 ) -> tuple[DecodeState, np.ndarray]:
        """One decode step for every slot: the new state and one token per slot [slots].

        Tokens of free slots are meaningless; the caller knows which slots it filled.
        """

    @abc.abstractmethod
    def free(self, decode_state: DecodeState, slot: int) -> DecodeState:
        """Mark `slot` empty (JetStream: free_resource) so it stops growing."""

    @abc.abstractmethod
    def init_decode_state(self) -> DecodeState:
        """An empty generate batch: every slot free."""

    # Batched prefill, for static batching -------------------------------------------------

    def prefill_batch(self, params: Params, prompts: Sequence[Sequence[int]],
                      keys: Sequence[np.ndarray | None]) -> list[tuple[Prefix, int]]:
        """Prefill several prompts together (padded to the longest); one prefix each.

        The default runs them one by one; a real engine runs one padded batch.
        """
        return [self.prefill(params, p, keys=k) for p, k in zip(prompts, keys)]

    # Moving KV ----------------------------------------------------------------------------

    @abc.abstractmethod
    def prefix_length(self, prefix: Prefix) -> int:
        """Tokens whose KV the prefix holds."""

    @abc.abstractmethod
    def prefix_bytes(self, prefix: Prefix) -> int:
        """Bytes of KV a prefix carries (what disaggregated serving sends over the network)."""

    @abc.abstractmethod
    def init_pool(self, num_blocks: int, block_size: int) -> Pool:
        """An empty pool of KV blocks for the prefix cache."""

    @abc.abstractmethod
    def save_blocks(self, pool: Pool, source: Prefix | tuple[DecodeState, int],
                    blocks: Sequence[int], first: int) -> Pool:
        """Copy blocks first, first+1, ... of a prefix (or of a slot, given as
        (decode_state, slot)) into pool blocks `blocks`."""

    @abc.abstractmethod
    def load_prefix(self, pool: Pool, blocks: Sequence[int], n_tokens: int,
                    capacity: int) -> Prefix:
        """A prefix holding the first n_tokens of the KV in pool `blocks`, with room for
        `capacity` tokens (what the prefill that continues it will need)."""
