# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Speculative decoding
#
# Batching buys throughput, not latency: however many sequences share a decode step, each
# still gets one token per step, and the step cannot be faster than reading every weight once
# (chapter 2). When what matters is how fast *one* answer streams, there is one more lever
# {cite:p}`austin2025scaling`: let a cheap *drafter* guess the next few tokens, and have the
# large *target* model check all the guesses in a single forward pass. Checking $\gamma + 1$
# positions reads the same weights as generating one token, so on hardware where decoding is
# memory-bound it costs about the same; every guess that survives is a token gained
# {cite:p}`leviathan2023speculative,chen2023speculative`. Done right, the output is exactly what
# the target alone would have produced — identical tokens for greedy decoding, the identical
# distribution when sampling. This chapter derives the rules, implements them with a draft
# model and with prompt lookup, checks the claims, and measures what they give on this device
# against what the formula predicts.

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import chisquare

from inferbook.book.listing import show_source
from inferbook.model import decode, decoder, kvcache
from inferbook.model.presets import get_preset
from inferbook.model.sampling import Sampler
from inferbook.perf import phase_time, speculation, timing
from inferbook.perf.hardware import get_chip
from inferbook.serving import speculative
from inferbook.serving.draft import PromptLookup, truncated_draft
from inferbook.serving.speculative import speculative_generate, verify

print(info.describe())
DEVICE = timing.device_name()

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.present import fmt_percent, fmt_ratio, fmt_seconds, glue

glue("ch13_device", DEVICE)

# %% [markdown]
# ## Why checking is cheap
#
# A decode step of a large model at batch one does about $2P$ FLOPs while reading $P$ weights:
# far below any accelerator's critical intensity. Scoring $\gamma + 1$ tokens does
# $(\gamma + 1)$ times the FLOPs but reads the weights once, so until $\gamma + 1$ approaches
# the critical batch size the time barely moves. The estimator shows it for LLaMA-2 70B on an
# H200, which holds its weights on one chip, with 1,000 tokens of context:

# %%
target_cfg, draft_cfg = get_preset("llama-2-70b"), get_preset("llama-2-7b")
chip = get_chip("H200")
context = 1000
step = phase_time.generate_step_seconds(target_cfg, chip, 1, context)
verify_s = {g: phase_time.prefill_seconds(target_cfg, chip, g + 1, context) for g in range(1, 9)}
for g, t in verify_s.items():
    print(f"gamma={g}: score {g + 1} tokens in {fmt_seconds(t)}  ({t / step:.2f}× one step)")
draft_step = phase_time.generate_step_seconds(draft_cfg, chip, 1, context)
c_h200 = draft_step / step
assert max(verify_s.values()) < 1.1 * step          # scoring 9 tokens costs ~ one step

# %% tags=["hide-input"]
glue("ch13_h200_step", fmt_seconds(step))
glue("ch13_h200_verify8", fmt_ratio(verify_s[8] / step, 2))
glue("ch13_c", f"{c_h200:.2f}")

# %% [markdown]
# One decode step takes {glue:text}`ch13_h200_step`; scoring nine tokens takes
# {glue:text}`ch13_h200_verify8` as long. A LLaMA-2 7B draft costs $c =$ {glue:text}`ch13_c`
# target steps per token. (In practice the draft has to share the target's vocabulary and
# agree with it often; families trained together, distilled drafts, and extra heads trained on
# the target's hidden states — Medusa, EAGLE {cite:p}`cai2024medusa,li2024eagle` — are the
# usual sources.)
#
# ## The rules
#
# The drafter proposes $d_1, \dots, d_\gamma$. The target runs once over
# $[x_\text{last}, d_1, \dots, d_\gamma]$, which gives its next-token distributions
# $p_1, \dots, p_{\gamma+1}$ at every position: $p_i$ is what the target would sample after
# $d_1 \dots d_{i-1}$.
#
# **Greedy.** Accept $d_i$ while it equals $\arg\max p_i$. At the first mismatch emit
# $\arg\max p_i$ instead; if all $\gamma$ match, emit $\arg\max p_{\gamma+1}$ as a bonus. Every
# emitted token is the target's own argmax after the previous ones, so the output is exactly
# greedy decoding's, and a round yields between 1 and $\gamma + 1$ tokens.
#
# **Sampling.** The drafter samples $d_i$ from its own distribution $q_i$. Accept it with
# probability $\min(1, p_i(d_i) / q_i(d_i))$. At the first rejection, draw the replacement
# from the *residual* $\max(0, p_i - q_i)$, renormalised; if all are accepted, draw a bonus
# from $p_{\gamma+1}$. The emitted token is then distributed exactly as $p_i$: a token $x$
# comes out either as an accepted draft, with probability $q(x) \min(1, p(x)/q(x)) =
# \min(p(x), q(x))$, or as a replacement, with probability
# $(1 - \sum_y \min(p(y), q(y))) \cdot \frac{\max(0, p(x) - q(x))}{\sum_y \max(0, p(y) - q(y))}$,
# and since $\sum_y \max(0, p - q) = 1 - \sum_y \min(p, q)$ the two add up to
# $\min(p, q) + \max(0, p - q) = p(x)$ {cite:p}`leviathan2023speculative`. Here is the library's
# rule, both cases in one function:

# %%
show_source(verify)

# %% [markdown]
# We can check the identity exactly for one position — no sampling involved — and then check
# the code by sampling it many times:

# %%
rng = np.random.default_rng(0)
V = 8
p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
accept = np.minimum(p, q)
residual = np.maximum(p - q, 0)
emitted = accept + (1 - accept.sum()) * residual / residual.sum()
assert np.allclose(emitted, p)          # the rule reproduces p, whatever q is
alpha_pq = speculation.acceptance_rate(p, q)

N = 50_000
keys = jax.random.split(jax.random.key(1), N)


def one_round(key):
    k_draft, k_rule = jax.random.split(key)
    d = jax.random.categorical(k_draft, jnp.log(q))[None]
    n, y = verify(d, jnp.asarray(q)[None], jnp.stack([jnp.asarray(p), jnp.asarray(p)]),
                  jnp.int32(1), k_rule, False)
    return jnp.where(n == 1, d[0], y), n


tokens, n_acc = map(np.asarray, jax.jit(jax.vmap(one_round))(keys))
counts = np.bincount(tokens, minlength=V)
pvalue = chisquare(counts, p * N).pvalue
assert pvalue > 1e-3, pvalue
assert abs(n_acc.mean() - alpha_pq) < 4 * np.sqrt(alpha_pq * (1 - alpha_pq) / N)

# %% tags=["hide-input"]
glue("ch13_alpha_pq", f"{alpha_pq:.3f}"); glue("ch13_acc_mc", f"{n_acc.mean():.3f}")
glue("ch13_pvalue", f"{pvalue:.2f}"); glue("ch13_N", f"{N:,}")

fig, ax = plt.subplots(figsize=(6.5, 3))
x = np.arange(V)
ax.bar(x - 0.2, q, 0.4, label="draft q", color="lightgrey")
ax.bar(x + 0.2, p, 0.4, label="target p", color="tab:blue")
ax.plot(x + 0.2, counts / N, "k.", label=f"speculative samples (N={N:,})")
ax.set_xlabel("token"); ax.set_ylabel("probability"); ax.legend(fontsize=8)
ax.set_title("Rejection sampling turns draws from q into draws from p", fontsize=9)
plt.show()

# %% [markdown]
# Over {glue:text}`ch13_N` rounds the emitted tokens match $p$ (chi-square p-value
# {glue:text}`ch13_pvalue`), and the draft was accepted in a fraction
# {glue:text}`ch13_acc_mc` of them, as predicted by the *acceptance rate*
# $\alpha = \sum_x \min(p(x), q(x)) =$ {glue:text}`ch13_alpha_pq`: one minus the total-variation
# distance between the two distributions. The library's tests run the same check on two
# consecutive tokens, through rejections, residuals and bonus tokens, with real models.
#
# ## How many tokens per step
#
# If each draft survives independently with probability $\alpha$, a round emits $k + 1$ tokens
# when the first $k$ drafts survive and the next fails, and $\gamma + 1$ when all do. The
# expectation is a geometric sum {cite:p}`leviathan2023speculative`:
#
# $$E[\text{tokens per step}] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}.$$
#
# A round costs $\gamma$ draft steps of relative cost $c$ plus one verification, so the speedup
# over plain decoding is
#
# $$\text{speedup} = \frac{1 - \alpha^{\gamma + 1}}{(1 - \alpha)(\gamma c + v)},$$
#
# where $v$, the cost of the verification relative to one decode step, is 1 in the paper's
# analysis and, as we just saw, about 1 on an accelerator.

# %%
show_source(speculation.speculative_speedup)

# %%
alphas = (0.6, 0.7, 0.8, 0.9)
best = {a: speculation.optimal_gamma(a, c_h200) for a in alphas}
assert best[0.9] > best[0.6]
print(best)

# %% tags=["hide-input"]
gammas = np.arange(0, 11)
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for a in alphas:
    ax.plot(gammas, [speculation.speculative_speedup(a, g, c_h200) for g in gammas], "o-",
            ms=3, label=f"α = {a}")
ax.axhline(1, color="grey", lw=0.8)
ax.set_xlabel("draft tokens per step, γ"); ax.set_ylabel("expected speedup")
ax.set_title(f"LLaMA-2 70B with a 7B draft on an {chip.name} (estimator, c = {c_h200:.2f})",
             fontsize=9)
ax.legend(fontsize=8)
plt.show()
glue("ch13_best_06", str(best[0.6])); glue("ch13_best_09", str(best[0.9]))
glue("ch13_speedup_08", fmt_ratio(speculation.speculative_speedup(0.8, best[0.8], c_h200)))

# %% [markdown]
# The better the draft agrees with the target, the further it pays to guess: the best $\gamma$
# grows from {glue:text}`ch13_best_06` at $\alpha = 0.6$ to {glue:text}`ch13_best_09` at
# $\alpha = 0.9$, and at $\alpha = 0.8$ the expected speedup is {glue:text}`ch13_speedup_08`.
# More predictable text (code, say) has higher $\alpha$ and rewards more aggressive drafting.
# Each accepted token costs more FLOPs than plain decoding — rejected drafts are thrown away,
# and the draft model runs too — which is why speculation trades throughput for latency. When
# the batch is small anyway (little memory, long contexts), the spare FLOPs are free and it
# can win on both {cite:p}`austin2025scaling`.
#
# ## With a draft model, on this device
#
# We need a draft that agrees with the target more often than chance. Without trained
# models at hand, we use *self-speculation*: the draft is the target's own first layer,
# followed by its final norm and unembedding — early exit, as in LayerSkip and Draft & Verify
# {cite:p}`elhoushi2024layerskip,zhang2023draftverify`. The target is the `small` preset.
# First the correctness claim for greedy decoding:

# %%
cfg = get_preset("small")
params = decoder.init_params(cfg, seed=0)
draft = truncated_draft(params, cfg, 1)
GAMMA, N_NEW = 4, 64
prompts = [list(range(1, 33)), [7, 300, 12, 5] * 6]
greedy_reference = decode.generate(params, cfg, prompts[:1], N_NEW).tokens[0]
out, greedy_stats = speculative_generate(params, cfg, prompts[0], N_NEW, draft, gamma=GAMMA)
assert out == greedy_reference                  # identical tokens
alpha_greedy = greedy_stats.acceptance_rate

# %% tags=["hide-input"]
glue("ch13_alpha_greedy", f"{alpha_greedy:.2f}")
print(f"greedy: identical to decode.generate; acceptance rate {alpha_greedy:.2f}")

# %% [markdown]
# The tokens are identical. But the acceptance rate is only {glue:text}`ch13_alpha_greedy`: a
# randomly initialised model's next-token distribution is nearly flat, so whether the one-layer
# draft's favourite token is also the four-layer target's favourite is close to a coin toss
# with many sides. With temperature-1 sampling the same draft does far better, because the
# rejection rule accepts in proportion to how much the two distributions *overlap*, and two
# nearly flat distributions overlap a lot:

# %%
SAMPLER = Sampler(temperature=1.0)
runs = [speculative_generate(params, cfg, prompt, N_NEW, draft, gamma=GAMMA, sampler=SAMPLER,
                             key=jax.random.key(10 + i))
        for i, prompt in enumerate(prompts)]
accepted = sum((s.accepted for _, s in runs), [])
drafted = sum((s.drafted for _, s in runs), [])
pooled = speculative.SpecStats(GAMMA, drafted, accepted)
alpha = pooled.acceptance_rate
measured_tpr = pooled.tokens_per_round
predicted_tpr = speculation.expected_tokens_per_step(alpha, GAMMA)
assert abs(measured_tpr / predicted_tpr - 1) < 0.1, (measured_tpr, predicted_tpr)
assert alpha > alpha_greedy

# %% tags=["hide-input"]
glue("ch13_alpha", f"{alpha:.2f}"); glue("ch13_rounds", str(pooled.rounds))
glue("ch13_tpr", f"{measured_tpr:.2f}"); glue("ch13_tpr_pred", f"{predicted_tpr:.2f}")
glue("ch13_gamma", str(GAMMA))
print(f"sampling: α = {alpha:.3f} over {pooled.rounds} rounds; tokens per round "
      f"{measured_tpr:.2f} measured, {predicted_tpr:.2f} by the formula")

fig, ax = plt.subplots(figsize=(6, 3))
hist = np.bincount(accepted, minlength=GAMMA + 1) / len(accepted)
model_probs = [alpha ** k * (1 - alpha) for k in range(GAMMA)] + [alpha ** GAMMA]
ax.bar(np.arange(GAMMA + 1) - 0.2, hist, 0.4, label="measured")
ax.bar(np.arange(GAMMA + 1) + 0.2, model_probs, 0.4, label="i.i.d. model with measured α")
ax.set_xlabel("drafts accepted in a round"); ax.set_ylabel("fraction of rounds")
ax.set_title(f"Acceptances per round, γ = {GAMMA}, one-layer self-draft", fontsize=9)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Over {glue:text}`ch13_rounds` rounds the draft's tokens were accepted at a rate
# $\hat\alpha =$ {glue:text}`ch13_alpha`, and a round produced {glue:text}`ch13_tpr` tokens on
# average — the formula, fed the measured $\hat\alpha$ and $\gamma =$ {glue:text}`ch13_gamma`,
# predicts {glue:text}`ch13_tpr_pred`. (We estimate $\alpha$ as accepted drafts over drafts
# tested, counting a round's drafts up to its first rejection — the maximum-likelihood estimate
# under the formula's assumption of independent acceptances.)
#
# Does it make generation faster here? The formula needs two more numbers, both measured on
# this device: the draft's cost per token relative to the target's ($c$), and the cost of
# scoring $\gamma + 1$ tokens relative to one ($v$).

# %%
S = 256
cache = kvcache.init_cache(cfg, 1, S)._replace(lengths=jnp.array([64], jnp.int32))
dcache = kvcache.init_cache(draft.cfg, 1, S)._replace(lengths=jnp.array([64], jnp.int32))
one = jnp.zeros((1, 1), jnp.int32)
steps = {"target": (params, cfg, one, cache), "draft": (draft.params, draft.cfg, one, dcache),
         "verify": (params, cfg, jnp.zeros((1, GAMMA + 1), jnp.int32), cache)}
# Three rounds that alternate the three programs, each keeping its fastest call: these steps
# take about a millisecond, and whatever else runs on the machine can only slow a call down.
fastest = {name: np.inf for name in steps}
for _ in range(3):
    for name, args in steps.items():
        fastest[name] = min(fastest[name], timing.time_fn(decode.extend, *args, repeats=5).min_s)
t_target, t_draft, t_verify = fastest["target"], fastest["draft"], fastest["verify"]
c_cpu, v_cpu = t_draft / t_target, t_verify / t_target
predicted = speculation.speculative_speedup(alpha, GAMMA, c_cpu, v_cpu)

plain = timing.time_fn(lambda: decode.generate(params, cfg, prompts[:1], N_NEW, sampler=SAMPLER,
                                              key=jax.random.key(0)).tokens,
                      repeats=3, warmup=0)
spec = timing.time_fn(lambda: speculative_generate(params, cfg, prompts[0], N_NEW, draft,
                                                  gamma=GAMMA, sampler=SAMPLER,
                                                  key=jax.random.key(0))[0], repeats=3, warmup=0)
measured = plain.median_s / spec.median_s

# %% tags=["hide-input"]
print(f"on {DEVICE}: c = {c_cpu:.2f}, v = {v_cpu:.2f}; predicted speedup {predicted:.2f}, "
      f"measured {measured:.2f} ({fmt_seconds(plain.median_s)} plain vs "
      f"{fmt_seconds(spec.median_s)} speculative for {N_NEW} tokens)")
if info.platform == "cpu":
    expect_measured(v_cpu > 1.05, "on a CPU, scoring several tokens costs more than one step",
                    expected="v above 1.05", measured=f"v = {v_cpu:.2f}")
glue("ch13_c_cpu", f"{c_cpu:.2f}"); glue("ch13_v_cpu", f"{v_cpu:.2f}")
glue("ch13_pred_cpu", fmt_ratio(predicted, 2)); glue("ch13_meas_cpu", fmt_ratio(measured, 2))
glue("ch13_plain_s", fmt_seconds(plain.median_s)); glue("ch13_spec_s", fmt_seconds(spec.median_s))
glue("ch13_v_h200", fmt_ratio(verify_s[GAMMA] / step, 2))

# %% [markdown]
# On {glue:text}`ch13_device` the one-layer draft costs $c =$ {glue:text}`ch13_c_cpu` of a
# target step, and scoring five tokens costs $v =$ {glue:text}`ch13_v_cpu` target steps —
# against {glue:text}`ch13_v_h200` on the H200 of the estimate above. A CPU runs few-row
# matrix multiplications far below its peak, so the extra tokens are not free, and the premise
# of speculative decoding only half holds. The formula with these measured costs predicts a
# speedup of {glue:text}`ch13_pred_cpu`; the measured one is {glue:text}`ch13_meas_cpu`
# ({glue:text}`ch13_plain_s` for plain sampling against {glue:text}`ch13_spec_s`). The rest of
# the gap is overhead the formula leaves out: a round is a separate compiled program with its
# own sampling and bookkeeping, and it synchronises with the host to learn how many tokens
# survived. On an accelerator, with $v \approx 1$ and a trained draft, the same code is the
# latency win the estimate promises.
#
# ## Drafting without a model: prompt lookup
#
# The cheapest drafter has no weights at all. *Prompt lookup* {cite:p}`saxena2023promptlookup`
# finds the most recent earlier occurrence of the last few tokens in the context and proposes
# whatever followed them. Its $c$ is zero, and whenever the output repeats its input —
# editing code, extracting fields, summarising with quotes — it guesses well. Its draft is
# deterministic, a $q$ with all its mass on the guess, so the same rule applies: accept with
# probability $p(d)$, otherwise sample from $p$ with $d$ removed.

# %%
show_source(PromptLookup.propose)

# %%
out, lookup_stats = speculative_generate(params, cfg, prompts[0], N_NEW, PromptLookup(),
                                         gamma=GAMMA)
assert out == greedy_reference
proposed = sum(d > 0 for d in lookup_stats.drafted)
rounds = lookup_stats.rounds
lookup_alpha = lookup_stats.acceptance_rate

# %% tags=["hide-input"]
glue("ch13_lookup_frac", fmt_percent(proposed / rounds))
glue("ch13_lookup_alpha", f"{lookup_alpha:.2f}")
print(f"prompt lookup proposed something in {proposed} of {rounds} rounds; "
      f"acceptance when tested {lookup_alpha:.2f}")

# %% [markdown]
# Prompt lookup leaves greedy output unchanged, as it must. On our random model it found
# something to propose in only {glue:text}`ch13_lookup_frac` of the rounds: random weights do
# not copy their prompts, so the context rarely repeats. Where it proposed, the acceptance rate
# was {glue:text}`ch13_lookup_alpha`. On a trained model answering from a document, both
# numbers are far higher; the estimator above says what they buy.
#
# ## Summary
#
# - Scoring $\gamma + 1$ tokens costs about one decode step on memory-bound hardware, so a
#   drafter's guesses can be checked almost for free.
# - Greedy verification keeps the output identical; rejection sampling keeps the output
#   distribution identical, whatever the draft.
# - Each round yields $(1 - \alpha^{\gamma+1}) / (1 - \alpha)$ tokens on average; we measured
#   {glue:text}`ch13_tpr` against a predicted {glue:text}`ch13_tpr_pred`.
# - The speedup also depends on what drafting and verification cost; on this CPU verification
#   is not free ($v =$ {glue:text}`ch13_v_cpu`), which the formula accounts for once $v$ is
#   measured.
