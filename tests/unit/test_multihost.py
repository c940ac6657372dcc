"""Multi-controller generation: two processes on loopback against the single-device model.

Each process of a job brings two CPU devices, joins over gloo (`parallel.multihost`) and runs
`sharded_decode.generate` on the job's four-device mesh; the tokens must be those of the
unsharded model (`decode.generate`) in this process, and the compiled programs' collectives
those of the same programs compiled here, in one process. One job runs the 1d-ws,
2d-ws, expert-parallel and weight-gathered cases together (`multihost_report.run_cases`), so
its processes start and join once; the command line runs 2d-ws from a checkpoint, each
process reading its blocks only; a job of four processes has one device in each.
A job must end in bounded time with one line when a process dies or the coordinator is
unreachable, leaving no process behind.
"""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest
from jax.sharding import NamedSharding

from inferbook.cli import launch, main
from inferbook.model import decode, decoder
from inferbook.model.checkpoint import load_checkpoint, save_checkpoint
from inferbook.model.presets import get_preset
from inferbook.parallel import local_job
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.multihost import free_port
from inferbook.parallel.multihost_report import Case, compiled_collectives, run_cases
from inferbook.parallel.sharding import make_plan, param_specs

PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
NEW = 5
CASES = [Case((4,), "1d-ws", PROMPTS, NEW, model="tiny", seed=0, programs=True),
         Case((1, 4), "expert-parallel", PROMPTS, NEW, model="tiny-moe", seed=1),
         Case((4,), "weight-gathered", PROMPTS, NEW, model="tiny", seed=2),
         Case((2, 2), "2d-ws", PROMPTS, NEW, model="tiny", seed=3)]


def unsharded(model, seed, prompts=PROMPTS, new=NEW):
    cfg = get_preset(model)
    return decode.generate(decoder.init_params(cfg, seed), cfg, prompts, new).tokens


def test_two_processes_generate_the_tokens_of_one_device_with_its_programs():
    reports = run_cases(CASES, processes=2)
    assert len(reports) == len(CASES)
    for case, report in zip(CASES, reports):
        assert report["tokens"] == unsharded(case.model, case.seed), case.layout
        # Each process holds the blocks of its own two devices, nothing of the others'.
        cfg = get_preset(case.model)
        assert report["held"] == [held_bytes(cfg, case.mesh, case.layout, p) for p in range(2)]
    # The programs two processes compiled hold the collectives one process compiles.
    cfg = get_preset("tiny")
    plan = make_plan(cfg, named_mesh((4,)), "1d-ws")
    assert reports[0]["collectives"] == json.loads(json.dumps(
        compiled_collectives(cfg, plan, len(PROMPTS), 16, 16 + NEW)))
    assert reports[0]["collectives"]["decode"]


def blocks_of(cfg, mesh_shape, layout, process, devices=2):
    """(leaf shape, distinct blocks held by `process`'s devices) for every weight, from a
    one-process mesh of the same shape whose devices [2p, 2p + 2) play process p."""
    mesh = named_mesh(mesh_shape)
    mine = set(mesh.devices.flat[process * devices:(process + 1) * devices])
    shapes = decoder.param_shapes(cfg)
    out = []
    for spec, shape in zip(jax.tree.leaves(param_specs(cfg, make_plan(cfg, mesh, layout))),
                           jax.tree.leaves(shapes, is_leaf=lambda x: isinstance(x, tuple))):
        index = NamedSharding(mesh, spec).devices_indices_map(tuple(shape))
        per_device = [tuple(s.indices(n)[:2] for s, n in zip(index[d], shape)) for d in mine]
        out.append((shape, per_device))
    return out


def held_bytes(cfg, mesh_shape, layout, process, devices=2):
    return sum(4 * math.prod(b - a for a, b in block)
               for _, blocks in blocks_of(cfg, mesh_shape, layout, process, devices)
               for block in blocks)


def read_bytes(cfg, mesh_shape, layout, process, devices=2):
    return sum(4 * math.prod(b - a for a, b in block)
               for _, blocks in blocks_of(cfg, mesh_shape, layout, process, devices)
               for block in set(blocks))


def test_processes_of_one_device_each_generate_the_tokens_of_one_device():
    """A process whose only device holds replicated weights (JAX's device_put of a local
    array then made arrays whose shards could not be listed)."""
    case = Case((4,), "1d-ws", PROMPTS[:3], NEW, model="tiny", seed=4)
    [report] = run_cases([case], processes=4)
    assert report["tokens"] == unsharded("tiny", 4, PROMPTS[:3])
    cfg = get_preset("tiny")
    assert report["held"] == [held_bytes(cfg, (4,), "1d-ws", p, devices=1) for p in range(4)]


def test_the_command_runs_a_job_that_reads_only_its_blocks(tmp_path, capsys):
    cfg = get_preset("tiny")
    save_checkpoint(tmp_path, cfg, decoder.init_params(cfg, 7))
    argv = ["generate", "--checkpoint", str(tmp_path), "--max-new-tokens", str(NEW), "--json",
            "--mesh", "2x2", "--layout", "2d-ws", "--processes", "2"]
    for p in PROMPTS:
        argv += ["--prompt-ids", ",".join(map(str, p))]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    loaded_cfg, params = load_checkpoint(tmp_path)
    assert out["tokens"] == decode.generate(params, loaded_cfg, PROMPTS, NEW).tokens
    total = sum(x.nbytes for x in jax.tree.leaves(params))
    read = [p["checkpoint_bytes_read"] for p in out["processes"]]
    assert read == [read_bytes(cfg, (2, 2), "2d-ws", p) for p in range(2)]
    assert all(r < total for r in read)


def children(pid):
    """Process ids whose parent is `pid` (from /proc)."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry.name))
    return kids


def connected(pid, port):
    """Whether process `pid` holds an established TCP connection to `port` (from /proc):
    a worker that has registered with the job's coordinator."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
                return True
    return False


def supervisor(process_id, port, new_tokens=400):
    """`inferbook generate` as one host of a two-host job would run it."""
    return subprocess.Popen(
        [sys.executable, "-m", "inferbook", "generate", "--model", "tiny", "--prompt-ids",
         "1,2,3", "--max-new-tokens", str(new_tokens), "--mesh", "2x2", "--layout", "2d-ws",
         "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
         "--process-id", str(process_id), "--timeout", "120", "--heartbeat-timeout", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_process_ends_every_process_of_the_job_with_one_line():
    """Two hosts' commands; process 1's worker is killed once the job runs. Its supervisor
    says so; process 0, whose collectives now wait for a dead peer, is ended by JAX's
    heartbeat timeout (--heartbeat-timeout 5) and says that in one line. Nothing is left running."""
    port = free_port()
    jobs = [supervisor(0, port), supervisor(1, port)]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (
            children(jobs[1].pid) and connected(children(jobs[1].pid)[0], port)):
        time.sleep(0.1)
    time.sleep(1.0)                          # registered with the coordinator: now running
    workers = [children(j.pid) for j in jobs]
    assert all(workers), "the workers did not start"
    os.kill(workers[1][0], signal.SIGKILL)
    killed = time.monotonic()
    results = [j.communicate(timeout=90) for j in jobs]
    assert time.monotonic() - killed < 60
    assert [j.returncode for j in jobs] == [1, 1]
    assert [out for out, _ in results] == ["", ""]
    lines = [err.splitlines() for _, err in results]
    assert lines[1] == ["inferbook generate: error: process 1 of 2 was killed by SIGKILL; "
                        "the job's other processes were stopped"]
    assert len(lines[0]) == 1 and lines[0][0].startswith("inferbook generate: error: process "
                                                         "0 of 2 ")
    assert not any(children(j.pid) for j in jobs)


def test_the_supervisor_stops_the_others_when_one_worker_dies():
    """The launcher's own watchdog, with stand-in workers: worker 1 kills itself, worker 0
    would sleep for ever; the job ends at once, worker 0 stopped and reaped."""
    worker = [sys.executable, "-c", "import os, pickle, signal, sys, time\n"
              "i = pickle.load(sys.stdin.buffer)\n"
              "os.kill(os.getpid(), signal.SIGKILL) if i == 1 else time.sleep(600)"]
    started = time.monotonic()
    code, line = local_job.run_workers(worker, [0, 1], [0, 1], 2, prefix=launch.ERROR)
    assert time.monotonic() - started < 30
    assert code == 1 and line == ("inferbook generate: error: process 1 of 2 was killed by "
                                  "SIGKILL; the job's other processes were stopped")
    assert not children(os.getpid()) or all(
        (Path("/proc") / str(c) / "cmdline").read_bytes().find(b"time.sleep(600)") < 0
        for c in children(os.getpid()))


def test_an_unreachable_coordinator_is_one_line_in_bounded_time():
    with socket.socket() as s:               # a port that nothing serves: bound, not listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        started = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "inferbook", "generate", "--model", "tiny", "--prompt-ids",
             "1,2,3", "--mesh", "2x2", "--coordinator", f"127.0.0.1:{port}",
             "--num-processes", "2", "--process-id", "1", "--timeout", "2"],
            capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60      # JAX's import, then the 2 s of waiting
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        f"inferbook generate: error: cannot reach the coordinator 127.0.0.1:{port} within "
        "2 s (connection refused); is process 0 of the job running there?"]


@pytest.mark.parametrize("argv, message", [
    (["--mesh", "8", "--processes", "2"], "N=4 query heads do not split 8 ways"),
    (["--mesh", "4", "--processes", "3"], "4 devices do not split evenly over 3 processes"),
    (["--processes", "2"], "need --mesh"),
    (["--mesh", "4", "--coordinator", "h:1", "--num-processes", "2"], "needs --num-processes"),
    (["--mesh", "4", "--num-processes", "2"], "go with --coordinator"),
    (["--mesh", "4", "--coordinator", "h:x", "--num-processes", "2", "--process-id", "0"],
     "is not HOST:PORT"),
    (["--mesh", "4", "--coordinator", "h:1", "--num-processes", "2", "--process-id", "2"],
     "process id 2 is not one of the job's 2"),
    (["--mesh", "4", "--processes", "2", "--coordinator", "h:1"], "not allowed with"),
    (["--mesh", "4", "--processes", "2", "--layout", "expert-parallel"],
     "tiny has no mixture of experts to split"),
])
def test_bad_job_arguments_are_refused_before_any_process_starts(capsys, argv, message):
    started = time.monotonic()
    code = main(["generate", "--model", "tiny", "--prompt-ids", "1,2", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and time.monotonic() - started < 10
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("code, stderr, expected", [
    (2, ["noise", "inferbook generate: error: prompt 0 is bad"],
     (2, "inferbook generate: error: prompt 0 is bad")),
    (-6, ["F1128 client.h:80] Terminating process because the JAX distributed service "
          "detected fatal errors.", "absl::Status: DEADLINE_EXCEEDED", "RPC: RegisterTask"],
     (1, "inferbook generate: error: process 3 of 4: the job's processes did not all join "
         "within 9 s (is every --process-id of the job running?)")),
    (-6, ["F1128 Terminating process because the JAX distributed service detected fatal "
          "errors. UNAVAILABLE: tasks are unhealthy (stopped sending heartbeats)"],
     (1, "inferbook generate: error: process 3 of 4 lost the job: another process stopped "
         "sending heartbeats (it died or hangs) or the coordinator went away")),
    (1, ["Traceback (most recent call last):", '  File "x.py", line 1', "    boom()",
         "RuntimeError: boom"],
     (1, "inferbook generate: error: process 3 of 4 failed: RuntimeError: boom")),
    (-15, [], (1, "inferbook generate: error: process 3 of 4 was killed by SIGTERM; the "
                  "job's other processes were stopped")),
])
def test_a_failed_worker_is_summed_up_in_one_line(code, stderr, expected):
    assert local_job.failure_line(3, 4, code, stderr, 9.0, launch.ERROR) == expected


@pytest.mark.parametrize("source, named", [
    (["--model", "tiny", "--prompt", "hello"], "--prompt"),
    (["--model", "smollm2-135m-instruct", "--prompt-ids", "1,2"],
     "--model smollm2-135m-instruct"),
    (["--model", "smollm2-135m-instruct", "--chat", "--prompt", "hi"], "--chat"),
    (["--checkpoint", "model.gguf", "--prompt-ids", "1,2"], "--checkpoint model.gguf"),
    (["--checkpoint", "hf:ORG/NAME", "--prompt", "hi"], "--prompt"),
])
def test_a_job_with_text_or_a_pretrained_format_is_refused_in_one_line(capsys, source, named):
    """A job runs token ids on a preset or a safetensors directory; text, the pretrained
    model's GGUF and the hub run in one process, and asking a job for them is one line."""
    code = main(["generate", *source, "--mesh", "2", "--processes", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "runs in one process" in err and named in err, err
