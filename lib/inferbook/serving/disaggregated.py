"""Disaggregated serving: prefill and generate on different servers, joined by a link.

JetStream's orchestrator runs a prefill thread per prefill engine, a generate thread per
generate engine, and a transfer thread that moves each finished prefix from one to the other.
This class simulates that arrangement in one process:

  * `prefill_servers` prefill servers take arrived requests first come, first served, run
    the engine's `prefill` at batch 1 and stream the first token straight away;
  * the prefix then crosses a link — one transfer at a time, each taking
    latency + bytes / bandwidth, the bytes being the engine's `prefix_bytes`; for the
    transformer that is tokens · 2·L·K·H·bytes per element, so a transfer takes what the
    estimator's `phase_time.kv_transfer_seconds` predicts (chapter 11 checks it);
  * the generate server inserts arrived prefixes into free slots between its generate steps.

Each server keeps its own clock, as separate machines would; the calls themselves run one after
another here, and each is charged what the timer says (measured on this device, or a cost
model). The benefit it shows: no prefill ever pauses the generate loop, so the time between a
user's tokens stays at one generate step. The price: a second machine, and KV bytes on the wire.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Sequence

from inferbook.serving.api import Engine, Params, Prefix
from inferbook.serving.checks import finite_number, positive_int
from inferbook.serving.request import Request, SequenceState, Status
from inferbook.serving.scheduler import Event, Orchestrator, RunResult

__all__ = ["Disaggregated"]


class Disaggregated(Orchestrator):
    """Separate prefill and generate servers; prefixes travel over a link.

    link_bytes_per_s: the link's bandwidth (e.g. a chip's interconnect from
      `inferbook.perf.hardware`, or a data-centre network). link_latency_s: fixed cost per transfer.
    """

    design = "disaggregated"

    def __init__(self, engine: Engine, params: Params = None, *, link_bytes_per_s: float,
                 link_latency_s: float = 0.0, prefill_servers: int = 1, **kwargs: Any) -> None:
        super().__init__(engine, params, **kwargs)
        self.link_bytes_per_s = finite_number("link_bytes_per_s", link_bytes_per_s, minimum=0.0,
                                              strictly=True)
        self.link_latency_s = finite_number("link_latency_s", link_latency_s, minimum=0.0)
        prefill_servers = positive_int("prefill_servers", prefill_servers)
        self.prefill_servers = [f"prefill{i}" for i in range(prefill_servers)]

    def transfer_s(self, prefix: Prefix) -> float:
        """Seconds to ship a prefix: latency + KV bytes / bandwidth."""
        return self.link_latency_s + self.engine.prefix_bytes(prefix) / self.link_bytes_per_s

    def run(self, trace: Sequence[Request]) -> RunResult:
        seqs = self.start(trace)
        for name in self.prefill_servers + ["generate", "link"]:
            self.clock[name] = 0.0
        pending, arrived = deque(seqs), deque()     # arrived: (time at generate, seq, prefix)
        running: dict[int, SequenceState] = {}
        free = list(range(self.slots))
        state = self.engine.init_decode_state()
        inf = float("inf")
        while pending or arrived or running:
            p = min(self.prefill_servers, key=lambda s: self.clock[s])
            p_time = max(self.clock[p], pending[0].request.arrival_s) if pending else inf
            if running:
                g_time = self.clock["generate"]
            else:
                g_time = max(self.clock["generate"], arrived[0][0]) if arrived else inf
            if p_time <= g_time:
                self.clock[p] = p_time
                self._prefill(p, pending.popleft(), arrived)
                continue
            self.clock["generate"] = g_time
            while arrived and arrived[0][0] <= g_time and free:
                _, seq, prefix = arrived.popleft()
                state = self.insert("generate", seq, prefix, state, free.pop(0), running)
            if running:
                state, freed = self.generate("generate", state, running)
                free = sorted(free + freed)
        return self.result(seqs)

    def _prefill(self, server: str, seq: SequenceState, arrived: deque) -> None:
        """Prefill on `server`, stream the first token, and send the prefix down the link."""
        prefix, tok = self.prefill(server, seq)
        if self.emit(seq, tok, self.clock[server]):
            return
        start = max(self.clock[server], self.clock["link"])
        end = start + self.transfer_s(prefix)
        self.clock["link"] = end
        self.events.append(Event("link", "transfer", start, end, (seq.id,),
                                 self.engine.prefix_length(prefix)))
        seq.status = Status.TRANSFERRING
        arrived.append((end, seq, prefix))
