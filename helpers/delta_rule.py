"""Linear attention and the (gated) delta rule: attention whose memory is one matrix per head, not a cache.

Shapes, in the course notation: N batch, h heads, T tokens, d_k the size of a query or key, d_v the size of a
value. Queries and keys are (N, h, T, d_k), values (N, h, T, d_v), the per-token gates ``beta`` and ``log_alpha``
(N, h, T); the **state** S is (N, h, d_k, d_v): per head, a map from keys to values (S^T k is what it recalls for
the key k). Queries are multiplied by ``scale`` (None: 1 / sqrt(d_k), as softmax attention's scores are).

* **Causal linear attention** drops the softmax: o_t = sum over i <= t of (q_t . k_i) v_i. In its parallel form
  that is ((Q K^T) masked) V, a (T, T) matrix like softmax attention's; as a recurrence it is a running sum,
  S_t = S_{t-1} + k_t v_t^T and o_t = S_t^T q_t: each token adds its key-value pair to the state, and the state
  never grows with T. The two are equal (tested).
* **The delta rule** writes a correction instead of a sum: it first reads what the state already holds for k_t,
  S_{t-1}^T k_t, and stores beta_t times the difference from v_t, so with ||k_t|| = 1 and beta_t = 1 the key k_t
  then recalls v_t exactly, whatever was stored before:
  S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T.
  (In the DeltaNet paper's layout S is (d_v, d_k), transposed, and the same rule reads
  S_t = S_{t-1}(I - beta_t k_t k_t^T) + beta_t v_t k_t^T.)
* **The gated delta rule** (Gated DeltaNet, Qwen3-Next's linear layers) first scales the old state by a decay
  alpha_t in (0, 1], so that the layer can forget: S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T.
  It is given as ``log_alpha`` = log alpha_t <= 0 (``transformers``' ``g``); None is alpha = 1, the plain rule.

The recurrence costs T sequential steps. The **chunked form** computes the same outputs a chunk of C tokens at a
time: inside a chunk every token's correction u_t depends on the corrections before it through a unit lower
triangular (C, C) system, solved at once; between chunks only the state is carried. The last chunk may be
shorter (C need not divide T). Both forms take an initial state and return the final one, so a prompt can be read
in chunks and generation continued one token at a time from the state (tested equal to each other and to
``transformers``' ``torch_recurrent_gated_delta_rule`` and ``torch_chunk_gated_delta_rule``).

``DeltaRuleAttention`` is a GPT layer of either kind (``GPTConfig.layer_kinds`` "linear" or "delta"): its cache
entry is the state alone, h · d_k · d_v numbers per sequence however long the text
(``helpers.kv_cache.recurrent_state_bytes``), where a softmax layer's KV cache grows by 2 · h_kv · d per token.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import merge_heads, split_heads
from helpers.layer_kind import LayerKind, check_entry_placed, register_kind
from helpers.masks import causal_mask
from helpers.rotary import rotary_cos_sin, rotate_first

__all__ = [
    "STATE_KINDS",
    "DeltaRuleAttention",
    "LinearAttentionLayer",
    "delta_rule_chunked",
    "delta_rule_recurrent",
    "delta_rule_step",
    "delta_rule_weights",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_step",
    "linear_attention_weights",
]

STATE_KINDS = ("linear", "delta")


# ---------------------------------------------------------------------------------------------
# Checks shared by every form
# ---------------------------------------------------------------------------------------------
def _check_inputs(q: Tensor, k: Tensor, v: Tensor, beta=None, log_alpha=None, initial_state=None) -> None:
    """Refuse inputs the forms cannot read, naming the shapes they expect: every form accepts and refuses the
    same ones (tested), so that the recurrent and chunked forms agree on every input either takes."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4 or not t.is_floating_point():
            got = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a float tensor (N, h, T, d), got {got}")
    if q.shape != k.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"q and k must be (N, h, T, d_k) and v (N, h, T, d_v) with the same N, h, T; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    N, h, T, d_k = q.shape
    for name, gate in (("beta", beta), ("log_alpha", log_alpha)):
        if gate is not None and (not isinstance(gate, Tensor) or tuple(gate.shape) != (N, h, T)):
            got = str(tuple(gate.shape)) if isinstance(gate, Tensor) else type(gate).__name__
            raise ValueError(f"{name} must be one number per head and token, (N, h, T) = {(N, h, T)}, got {got}")
    expected = (N, h, d_k, v.size(-1))
    if initial_state is not None and (not isinstance(initial_state, Tensor) or initial_state.shape != expected):
        got = str(tuple(initial_state.shape)) if isinstance(initial_state, Tensor) else type(initial_state).__name__
        raise ValueError(f"initial_state must be the state (N, h, d_k, d_v) = {expected}, got {got}")
    given = {"q": q, "k": k, "v": v, "beta": beta, "log_alpha": log_alpha, "initial_state": initial_state}
    tensors = {name: t for name, t in given.items() if t is not None}
    kinds = {(t.dtype, t.device) for t in tensors.values()}
    if len(kinds) > 1:
        found = ", ".join(f"{name} {t.dtype} on {t.device}" for name, t in tensors.items())
        raise TypeError(f"every input must share one dtype and device (q's: {q.dtype} on {q.device}); got {found}")
    if beta is not None and not bool(((beta >= 0) & (beta <= 1)).all()):  # NaN fails both comparisons
        raise ValueError(
            "beta must be in [0, 1] (the share of the error written back; outside it the rule amplifies the state), "
            f"got values {float(beta.min()):.3g} .. {float(beta.max()):.3g}"
        )
    if log_alpha is not None and not bool(((log_alpha <= 0) & torch.isfinite(log_alpha)).all()):
        raise ValueError(
            "log_alpha must be <= 0 and finite (alpha = exp(log_alpha) in (0, 1] scales the old state down; "
            "-inf and NaN are refused: to forget everything use a large negative number such as -30)"
        )


def _scaled(q: Tensor, scale: float | None) -> Tensor:
    return q * (q.size(-1) ** -0.5 if scale is None else scale)


def _start(q: Tensor, v: Tensor, initial_state: Tensor | None) -> Tensor:
    """The state before the first token: the given one, or zeros (N, h, d_k, d_v)."""
    if initial_state is not None:
        return initial_state
    return q.new_zeros(*q.shape[:2], q.size(-1), v.size(-1))


# ---------------------------------------------------------------------------------------------
# Causal linear attention: parallel and recurrent
# ---------------------------------------------------------------------------------------------
def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None = None, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Causal linear attention in its parallel form: q, k (N, h, T, d_k), v (N, h, T, d_v) -> the outputs
    ((Q K^T) masked) V + Q S_0, (N, h, T, d_v), and the state after the last token, S_0 + K^T V (N, h, d_k, d_v).

    The scores are not normalised: the masked (T, T) matrix multiplies V directly (the course's causal mask,
    True = blocked, sets the future to 0)."""
    _check_inputs(q, k, v, initial_state=initial_state)
    state = _start(q, v, initial_state)
    scores = linear_attention_weights(q, k, scale)  # (N, h, T, T)
    return scores @ v + _scaled(q, scale) @ state, state + k.transpose(-1, -2) @ v


def linear_attention_weights(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """Linear attention's (T, T) matrix per head: the scaled Q K^T with the future set to 0 (the course's causal
    mask, True = blocked), q and k (N, h, T, d_k) -> (N, h, T, T). Its rows are not normalised."""
    return (_scaled(q, scale) @ k.transpose(-1, -2)).masked_fill(causal_mask(q.size(2), q.device), 0.0)


def linear_attention_step(state: Tensor, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None):
    """One token of linear attention: state (N, h, d_k, d_v), q and k (N, h, d_k), v (N, h, d_v) ->
    (output (N, h, d_v), new state). S_t = S_{t-1} + k_t v_t^T, then o_t = S_t^T q_t."""
    state = state + k[..., :, None] * v[..., None, :]  # the outer product k v^T, (N, h, d_k, d_v)
    return (_scaled(q, scale)[..., None, :] @ state)[..., 0, :], state


def linear_attention_recurrent(
    q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None = None, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Causal linear attention as a recurrence, token by token (``linear_attention_step``): the same arguments
    and results as ``linear_attention``."""
    _check_inputs(q, k, v, initial_state=initial_state)
    state, outputs = _start(q, v, initial_state), [v.new_zeros(*v.shape[:2], 0, v.size(-1))]  # T = 0: no output
    for t in range(q.size(2)):
        out, state = linear_attention_step(state, q[:, :, t], k[:, :, t], v[:, :, t], scale)
        outputs.append(out[:, :, None])
    return torch.cat(outputs, dim=2), state


# ---------------------------------------------------------------------------------------------
# The (gated) delta rule: recurrent and chunked
# ---------------------------------------------------------------------------------------------
def delta_rule_step(
    state: Tensor, q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor | None = None, scale=None
) -> tuple[Tensor, Tensor]:
    """One token of the (gated) delta rule: state (N, h, d_k, d_v), q and k (N, h, d_k), v (N, h, d_v), beta and
    log_alpha (N, h) -> (output (N, h, d_v), new state).

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, then o_t = S_t^T q_t: decay the old state,
    read what it recalls for k_t, and write beta_t times the error back under k_t."""
    if log_alpha is not None:
        state = state * log_alpha.exp()[..., None, None]
    recalled = (k[..., None, :] @ state)[..., 0, :]  # S^T k, (N, h, d_v): what the state holds for this key
    correction = beta[..., None] * (v - recalled)  # (N, h, d_v)
    state = state + k[..., :, None] * correction[..., None, :]
    return (_scaled(q, scale)[..., None, :] @ state)[..., 0, :], state


def delta_rule_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_alpha: Tensor | None = None,
    initial_state: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The (gated) delta rule token by token (``delta_rule_step``): q, k (N, h, T, d_k), v (N, h, T, d_v), beta
    and log_alpha (N, h, T) -> outputs (N, h, T, d_v) and the state after the last token (N, h, d_k, d_v).
    ``log_alpha`` None: no decay (the plain delta rule)."""
    _check_inputs(q, k, v, beta, log_alpha, initial_state)
    state, outputs = _start(q, v, initial_state), [v.new_zeros(*v.shape[:2], 0, v.size(-1))]  # T = 0: no output
    for t in range(q.size(2)):
        gate = None if log_alpha is None else log_alpha[:, :, t]
        out, state = delta_rule_step(state, q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], gate, scale)
        outputs.append(out[:, :, None])
    return torch.cat(outputs, dim=2), state


def _chunk(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_alpha: Tensor, state: Tensor):
    """One chunk of C tokens read from the state S_0 before it (q already scaled): outputs (N, h, C, d_v) and
    the state after the chunk.

    With gamma_t = alpha_1 ... alpha_t (the decay since the chunk began), unrolling the rule gives
    S_t = gamma_t S_0 + sum over i <= t of (gamma_t / gamma_i) k_i u_i^T, where u_i is the correction token i
    writes; each u_t = beta_t (v_t - gamma_t S_0^T k_t - sum over i < t of (gamma_t / gamma_i) (k_t . k_i) u_i)
    needs the earlier ones: (I + A) U = beta (V - gamma K S_0), A strictly lower triangular, one solve."""
    C = q.size(2)
    log_gamma = log_alpha.cumsum(-1)  # (N, h, C)
    future = causal_mask(C, q.device)  # True = blocked: key i after query t
    # decay[t, i] = gamma_t / gamma_i for i <= t, 0 above the diagonal (set before exp: no overflow there)
    decay = (log_gamma[..., :, None] - log_gamma[..., None, :]).masked_fill(future, -math.inf).exp()
    gamma = log_gamma.exp()[..., None]  # (N, h, C, 1)
    interactions = beta[..., None] * (k @ k.transpose(-1, -2)) * decay  # A, kept below the diagonal only
    system = interactions.tril(-1) + torch.eye(C, dtype=q.dtype, device=q.device)
    targets = beta[..., None] * (v - gamma * (k @ state))  # (N, h, C, d_v)
    corrections = torch.linalg.solve_triangular(system, targets, upper=False, unitriangular=True)  # U
    out = gamma * (q @ state) + ((q @ k.transpose(-1, -2)) * decay) @ corrections
    to_end = (log_gamma[..., -1:] - log_gamma).exp()[..., None]  # gamma_C / gamma_i, (N, h, C, 1)
    state = gamma[..., -1:, :] * state + (k * to_end).transpose(-1, -2) @ corrections
    return out, state


def delta_rule_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_alpha: Tensor | None = None,
    chunk_size: int = 64,
    initial_state: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The (gated) delta rule a chunk of ``chunk_size`` tokens at a time: the arguments and results of
    ``delta_rule_recurrent``, and the same numbers (up to rounding). The last chunk holds T mod C tokens when
    C does not divide T; only the state (N, h, d_k, d_v) passes from one chunk to the next."""
    _check_inputs(q, k, v, beta, log_alpha, initial_state)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int number of tokens, got {chunk_size!r}")
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):  # torch's triangular solve has no 16-bit form: solve in float32
        q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
        log_alpha = None if log_alpha is None else log_alpha.float()
        initial_state = None if initial_state is None else initial_state.float()
    state, outputs = _start(q, v, initial_state), [v.new_zeros(*v.shape[:2], 0, v.size(-1))]  # T = 0: no output
    q = _scaled(q, scale)
    log_alpha = torch.zeros_like(beta) if log_alpha is None else log_alpha
    for start in range(0, q.size(2), chunk_size):
        part = slice(start, start + chunk_size)
        out, state = _chunk(q[:, :, part], k[:, :, part], v[:, :, part], beta[:, :, part], log_alpha[:, :, part], state)
        outputs.append(out)
    return torch.cat(outputs, dim=2).to(dtype), state.to(dtype)


def delta_rule_weights(
    q: Tensor, k: Tensor, beta: Tensor, log_alpha: Tensor | None = None, scale: float | None = None
) -> Tensor:
    """The (T, T) matrix W per head with outputs = W V for the (gated) delta rule from an empty state:
    q, k (N, h, T, d_k), beta and log_alpha (N, h, T) -> (N, h, T, T), zero above the diagonal.

    What the layer "attends" with: W = ((Q K^T) * decay) (I + A)^-1 diag(beta) (``_chunk``'s terms, one chunk of
    all T tokens). Unlike softmax weights its rows need not sum to 1 and may be negative; for linear attention it
    is the masked Q K^T of ``linear_attention``."""
    _check_inputs(q, k, k, beta, log_alpha)
    T = q.size(2)
    eye = torch.eye(T, dtype=q.dtype, device=q.device)
    log_alpha = torch.zeros_like(beta) if log_alpha is None else log_alpha
    # The chunk's outputs for V = the identity (d_v = T) are W itself: o_t = sum_j W[t, j] v_j with v_j = e_j.
    identity = eye.expand(*q.shape[:2], T, T)
    weights, _ = _chunk(_scaled(q, scale), k, identity, beta, log_alpha, q.new_zeros(*q.shape[:2], q.size(-1), T))
    return weights


# ---------------------------------------------------------------------------------------------
# The layer: a GPT block's attention whose cache is the state
# ---------------------------------------------------------------------------------------------
@register_kind("delta")
class DeltaRuleAttention(LayerKind):
    """A causal layer of kind "linear" (linear attention) or "delta" (the gated delta rule): x (N, L, E) ->
    (N, L, E), with the forward signature of ``helpers.gpt.CausalSelfAttention`` so that a ``GPT`` block can hold
    either. h heads of d_k = d_v = d.

    Projections: ``q_proj``, ``k_proj``, ``v_proj`` (E -> h·d) and ``out_proj`` (h·d -> E), as softmax
    attention's; "delta" adds ``beta_proj`` (E -> h, beta = sigmoid, in (0, 1)) and ``alpha_proj`` (E -> h,
    log alpha = -softplus, <= 0). Queries and keys are scaled to unit length per head (as Qwen3-Next's linear
    layers do: with ||k|| = 1 and beta <= 1 the delta rule's I - beta k k^T never amplifies the state), then
    rotated by their positions if the model is rotary. The cache entry is ``(state,)``, (N, h, d, d).

    Without a cache (training) "delta" runs ``delta_rule_chunked``; generation reads the prompt chunked into a
    state and then runs ``delta_rule_step`` per token; "linear" runs ``linear_attention`` either way.

    As a kind of ``GPT`` layer it carries partial rotary (``rotary_fraction``: the first ``rotary_dim`` features
    of each head rotate) and refuses the softmax's switches (QK-norm: its queries and keys are unit length
    already; sinks, query scale and the output gate are not built for it).
    """

    window = None  # no window: a rolling cache keeps the whole state (it does not grow)
    rotary_base: float
    carries = frozenset({"rotary_fraction"})

    @classmethod
    def from_config(cls, config, layer: int) -> DeltaRuleAttention:
        rotary = config.positions == "rotary"
        base = config.layer_rotary_base(layer)
        return cls(
            config.embed_dim, config.num_heads, config.head_dim, cls.kind, rotary, base, rotary_dim=config.rotary_dim
        )

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        head_dim: int,
        kind: str = "delta",
        rotary: bool = False,
        rotary_base: float = 10000.0,
        chunk_size: int = 64,
        rotary_dim: int | None = None,
    ) -> None:
        super().__init__()
        if kind not in STATE_KINDS:
            raise ValueError(f"kind must be one of {STATE_KINDS}, got {kind!r}")
        self.kind, self.num_heads, self.head_dim, self.chunk_size = kind, num_heads, head_dim, chunk_size
        self.rotary, self.rotary_base = rotary, rotary_base
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim  # r: the first r features rotate
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(embed_dim, inner, bias=False)
        self.k_proj = nn.Linear(embed_dim, inner, bias=False)
        self.v_proj = nn.Linear(embed_dim, inner, bias=False)
        self.out_proj = nn.Linear(inner, embed_dim, bias=False)
        if kind == "delta":
            self.beta_proj = nn.Linear(embed_dim, num_heads)
            self.alpha_proj = nn.Linear(embed_dim, num_heads)
            nn.init.constant_(self.alpha_proj.bias, -3.0)  # alpha = exp(-softplus(-3)) ≈ 0.95: remember at first

    def gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """beta and log alpha of "delta", (N, h, L) each, from x (N, L, E)."""
        beta = torch.sigmoid(self.beta_proj(x)).transpose(1, 2)
        log_alpha = -F.softplus(self.alpha_proj(x)).transpose(1, 2)
        return beta, log_alpha

    def forward(self, x, positions, past=None, need_weights=False, rotation=None):
        """x (N, L, E) at ``positions`` (L,); ``past``: None or ``(state,)``, (N, h, d, d), after the earlier
        tokens. Returns the output (N, L, E) and ``(state,)`` after these tokens; with ``need_weights`` (no cache
        only) also the (N, h, L, L) matrix W with outputs = W V (``delta_rule_weights``)."""
        q = F.normalize(split_heads(self.q_proj(x), self.num_heads), dim=-1)  # (N, h, L, d), unit length
        k = F.normalize(split_heads(self.k_proj(x), self.num_heads), dim=-1)
        v = split_heads(self.v_proj(x), self.num_heads)
        if self.rotary:
            r = self.rotary_dim
            cos, sin = rotation if rotation is not None else rotary_cos_sin(positions, r, self.rotary_base, x.dtype)
            q, k = rotate_first(q, cos, sin, r), rotate_first(k, cos, sin, r)
        state = None if past is None else past[0]
        if need_weights and state is not None:
            raise ValueError("need_weights needs the whole sequence: a linear or delta layer's cache holds no keys")
        if self.kind == "linear":
            out, state = linear_attention(q, k, v, state)
            weights = linear_attention_weights(q, k) if need_weights else None
        else:
            beta, log_alpha = self.gates(x)
            if state is not None and x.size(1) == 1:  # generation: one step of the recurrence
                out, state = delta_rule_step(state, q[:, :, 0], k[:, :, 0], v[:, :, 0], beta[..., 0], log_alpha[..., 0])
                out = out[:, :, None]
            else:
                out, state = delta_rule_chunked(q, k, v, beta, log_alpha, self.chunk_size, state)
            weights = delta_rule_weights(q, k, beta, log_alpha) if need_weights else None
        out = self.out_proj(merge_heads(out))
        return (out, (state,), weights) if need_weights else (out, (state,))

    def check_entry(self, entry, N: int, length: int, kept: int, weight: Tensor, layer: int) -> None:
        """The entry ``(state,)``, (N, h, d, d), in the model's dtype and device, however many tokens were read."""
        expected = (N, self.num_heads, self.head_dim, self.head_dim)
        state = entry[0] if isinstance(entry, tuple) and len(entry) == 1 else None
        if not isinstance(state, Tensor) or tuple(state.shape) != expected:
            raise ValueError(
                f"cache layer {layer} (kind {self.kind!r}) must hold (state,), a state (N, h, d, d) = "
                f"{expected}, got {entry!r:.80}: make one with model.new_cache()"
            )
        check_entry_placed(state, "a state", weight, layer)

    def cache_numbers_per_token(self) -> int:
        """0: the state, h · d · d numbers per sequence, does not grow with the tokens read."""
        return 0


@register_kind("linear")
class LinearAttentionLayer(DeltaRuleAttention):
    """The kind "linear": a ``DeltaRuleAttention`` of kind "linear" (causal linear attention, no gates)."""
