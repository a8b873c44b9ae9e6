"""A small decoder-only (GPT-style) causal language model with a KV cache, grouped-query attention, optional
sliding windows and three kinds of positions (rotary, sinusoidal, none).

Shapes, in the course notation: N batch, L new tokens in this call, T tokens so far (the cache's length plus
L), E embedding size, h query heads, g key/value heads (h a multiple of g), d = E / h head size, V vocabulary.

Generation writes one token at a time. Without a cache every step runs the whole sequence again; with the KV
cache every layer keeps the keys and values of the tokens it has seen, (N, g, T, d) each, and a step runs only
the newest token: its query attends over the cached keys plus its own. The outputs are the same (tested);
the work per token no longer grows with the length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.attention import GroupedQueryAttention
from helpers.embeddings import PositionalEncoding
from helpers.rotary import apply_rotary

__all__ = ["GPT", "GPTConfig", "KVCache", "generate", "kv_cache_bytes", "train_gpt"]

POSITIONS = ("rotary", "sinusoidal", "none")


@dataclass
class GPTConfig:
    """The model's sizes. ``num_kv_heads`` < ``num_heads`` is grouped-query attention (1: multi-query);
    ``window`` limits each token's attention to itself and the ``window - 1`` tokens before it."""

    vocab_size: int
    embed_dim: int = 64
    num_heads: int = 4
    num_kv_heads: int = 4
    num_layers: int = 2
    ff_dim: int = 256
    max_len: int = 512  # longest sequence with sinusoidal positions (rotary and none have no limit)
    positions: str = "rotary"
    window: int | None = None

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be a positive number of tokens or None, got {self.window}")


def kv_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, tokens: int, bytes_per_number: int = 2, batch_size: int = 1
) -> int:
    """Size of a KV cache: 2 (keys and values) × layers × kv-heads × head size × tokens × bytes (× batch)."""
    return 2 * num_layers * num_kv_heads * head_dim * tokens * bytes_per_number * batch_size


class KVCache:
    """Per layer, the keys and values of every token seen so far: two (N, g, T, d) tensors, or None at first."""

    def __init__(self, num_layers: int) -> None:
        self.layers: list[tuple[Tensor, Tensor] | None] = [None] * num_layers

    @property
    def length(self) -> int:
        """T: how many tokens the cache holds (the position of the next token)."""
        first = self.layers[0]
        return 0 if first is None else first[0].size(-2)

    def nbytes(self) -> int:
        """Bytes held by all cached keys and values."""
        return sum(t.numel() * t.element_size() for entry in self.layers if entry is not None for t in entry)


def attention_mask(query_positions: Tensor, num_keys: int, window: int | None) -> Tensor:
    """(L, T) boolean mask, **True = may attend** (F.scaled_dot_product_attention's convention).

    The query at position p may see keys 0..p (causal), and with a window only keys p - window + 1 .. p.
    The queries are the newest L tokens, so with a cache they sit at the end: a top-left aligned
    ``is_causal=True`` would let the one new query of a cached step see only the first key.
    """
    offset = query_positions[:, None] - torch.arange(num_keys, device=query_positions.device)  # (L, T)
    may_attend = offset >= 0
    if window is not None:
        may_attend &= offset < window
    return may_attend


class CausalSelfAttention(nn.Module):
    """Masked self-attention with a KV cache, using ``GroupedQueryAttention``'s four projections.

    ``helpers.GroupedQueryAttention`` projects its key and value *inputs* on every call; a cache must keep the
    projected (and, with RoPE, rotated) keys and values instead, so this module owns one and runs its
    ``q_proj``, ``k_proj``, ``v_proj`` and ``out_proj`` itself. Without cache and rotary positions it computes
    exactly ``self.projections(x, x, x, attn_mask=causal_mask(L))`` (tested).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.projections = GroupedQueryAttention(config.embed_dim, config.num_heads, config.num_kv_heads, bias=False)
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.embed_dim // config.num_heads
        self.rotary, self.window = config.positions == "rotary", config.window

    def forward(
        self, x: Tensor, positions: Tensor, past: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x (N, L, E) at ``positions`` (L,); past keys and values (N, g, T - L, d) each, or None.
        Returns the output (N, L, E) and the keys and values of all T tokens, (N, g, T, d) each."""
        N, L, E = x.shape
        p, h, g, d = self.projections, self.num_heads, self.num_kv_heads, self.head_dim
        q = p.q_proj(x).view(N, L, h, d).transpose(1, 2)  # (N, h, L, d)
        k = p.k_proj(x).view(N, L, g, d).transpose(1, 2)  # (N, g, L, d)
        v = p.v_proj(x).view(N, L, g, d).transpose(1, 2)  # (N, g, L, d)
        if self.rotary:  # rotate by each token's own position, before caching: cached keys never change
            q, k = apply_rotary(q, positions), apply_rotary(k, positions)
        if past is not None:
            k = torch.cat((past[0], k), dim=2)  # (N, g, T, d): the new tokens go after the old ones
            v = torch.cat((past[1], v), dim=2)
        keys, values = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)  # (N, h, T, d)
        mask = attention_mask(positions, k.size(2), self.window)  # (L, T), True = may attend
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # (N, h, L, d)
        return p.out_proj(out.transpose(1, 2).reshape(N, L, E)), (k, v)


class DecoderBlock(nn.Module):
    """Pre-norm block: x + attention(LayerNorm(x)), then x + feed-forward(LayerNorm(x)). (N, L, E) -> (N, L, E)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(config.embed_dim), nn.LayerNorm(config.embed_dim)
        self.attention = CausalSelfAttention(config)
        self.feed_forward = nn.Sequential(
            nn.Linear(config.embed_dim, config.ff_dim), nn.GELU(), nn.Linear(config.ff_dim, config.embed_dim)
        )

    def forward(self, x, positions, past=None):
        attended, present = self.attention(self.norm1(x), positions, past)
        x = x + attended
        return x + self.feed_forward(self.norm2(x)), present


class GPT(nn.Module):
    """Decoder-only causal language model: ids (N, L) -> next-token logits (N, L, V).

    ``forward(ids, cache)``: with a ``KVCache`` the ids are the next L tokens after the cache's T - L, and the
    cache grows by them. ``embed`` and ``run`` split the forward pass so that a lesson can take gradients with
    respect to the token vectors.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.embed_dim)
        self.positional = (
            PositionalEncoding(config.embed_dim, config.max_len) if config.positions == "sinusoidal" else None
        )
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.embed_dim)
        self.lm_head = nn.Linear(config.embed_dim, config.vocab_size, bias=False)

    def embed(self, ids: Tensor, start: int = 0) -> Tensor:
        """Token vectors (N, L, E) of ``ids`` (N, L) at positions start .. start + L - 1 (sinusoidal added)."""
        x = self.token_embedding(ids)
        return x if self.positional is None else self.positional(x, start=start)

    def run(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        """Blocks, final norm and output layer: token vectors (N, L, E) -> logits (N, L, V)."""
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + x.size(1), device=x.device)  # (L,)
        for index, block in enumerate(self.blocks):
            x, present = block(x, positions, None if cache is None else cache.layers[index])
            if cache is not None:
                cache.layers[index] = present
        return self.lm_head(self.norm(x))

    def forward(self, ids: Tensor, cache: KVCache | None = None) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"ids must be (N, L) token ids, got shape {tuple(ids.shape)}")
        return self.run(self.embed(ids, start=0 if cache is None else cache.length), cache)

    def new_cache(self) -> KVCache:
        return KVCache(len(self.blocks))


@torch.no_grad()
def generate(model: GPT, prompt: Tensor, max_new_tokens: int, use_cache: bool = True) -> tuple[Tensor, Tensor]:
    """Greedy generation: prompt (N, T0) -> tokens (N, T0 + new) and each step's logits (N, new, V).

    Without the cache each step runs the model on the whole sequence so far and keeps the last position's
    logits; with it, the prompt fills the cache once and every later step runs the newest token only.
    """
    if prompt.dim() != 2 or prompt.size(1) < 1:
        raise ValueError(f"prompt must be (N, T0) token ids with T0 >= 1, got shape {tuple(prompt.shape)}")
    tokens, step_logits = prompt, []
    cache = model.new_cache() if use_cache else None
    new = prompt
    for _ in range(max_new_tokens):
        logits = model(new, cache)[:, -1] if use_cache else model(tokens)[:, -1]  # (N, V)
        next_token = logits.argmax(dim=-1, keepdim=True)  # (N, 1)
        tokens = torch.cat((tokens, next_token), dim=1)
        step_logits.append(logits)
        new = next_token
    return tokens, torch.stack(step_logits, dim=1)


def train_gpt(
    model: GPT,
    inputs: Tensor,
    targets: Tensor,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    ignore_index: int = -100,
    seed: int = 0,
) -> list[float]:
    """Train on (inputs, targets), both (num_sequences, T) token ids, for a fixed number of steps with AdamW.

    A language model's targets are its inputs shifted by one; other tasks give other targets (positions to
    skip hold ``ignore_index``). Returns the loss of every step.
    """
    if inputs.shape != targets.shape:
        raise ValueError(f"inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)} must have one shape")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    losses = []
    for _ in range(steps):
        rows = torch.randint(len(inputs), (batch_size,), generator=generator)
        logits = model(inputs[rows])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets[rows].flatten(), ignore_index=ignore_index)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses
