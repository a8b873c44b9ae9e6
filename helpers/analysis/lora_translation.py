"""Lesson 17's experiment: SmolLM2 taught the course's German→English captions through LoRA adapters.

The course's decoder-only ``GPT`` (SmolLM2-135M-Instruct from ``helpers.models.language_model``) reads a caption
pair as plain text, no chat template:

    German: Der Musiker fährt Fahrrad.
    English: The musician is riding a bicycle.<end>

and is trained, with every pretrained weight frozen and adapters on some projections (``helpers.lora.add_lora``),
to predict the English side only. What this module holds, in the order of an experiment:

* ``encode_pair`` / ``encode_corpus``: a pair's token ids (T,), the loss mask (1 on the English tokens and the end
  token only) and, for each token, the German or English whitespace word it belongs to (what the gold alignments
  of ``data/captions/*.align`` count); ``pad_right`` makes a batch (N, T);
* ``train_adapters``: AdamW on the trainable parameters, batches of 8 in an order the seed fixes, the loss on the
  English tokens; per-step losses and seconds;
* ``translate_captions`` (greedy, the course's KV cache, prompt ``PROMPT``, stopping at the end token or a newline)
  and ``caption_scores`` (sacreBLEU and chrF, ``helpers.models.translation.score_translations``);
* ``rank_for_budget``: the rank that gives a set of targets as many trainable numbers as a budget;
* ``update_sizes``: what the adapters changed, ‖(α/r)·B A‖_F by layer and projection, and its effective rank
  (``effective_rank``: Roy & Vetterli's; ``energy_rank``: the singular values holding 90 % of the energy).

Where each head's attention goes, scored against the gold alignments, is ``helpers.analysis.lm_alignment``.
Nothing here sets torch's number of threads: the caller decides.

Shapes: N batch, T tokens of one pair (prompt, answer and end), V vocabulary, n_layers layers, h query heads.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.data.corpus import ParallelCorpus
from helpers.gpt import GPT, generate
from helpers.lora import LoRALinear, lora_layers, resolve_targets
from helpers.models.translation.evaluation import Scores, score_translations

__all__ = [
    "ANSWER",
    "PROMPT",
    "CaptionPair",
    "TrainingRecord",
    "UpdateSizes",
    "answer_loss",
    "caption_scores",
    "effective_rank",
    "encode_corpus",
    "encode_pair",
    "energy_rank",
    "pad_right",
    "rank_for_budget",
    "train_adapters",
    "translate_captions",
    "update_singular_values",
    "update_sizes",
]

# The prompt ends at "English:" and the answer starts with the space before the first English word: the prompt a
# trained model is given is then exactly the tokens it was trained on before its answer (SmolLM2's byte-level BPE
# splits "…English:" + " The…" where the two texts meet, tokenized together or apart; a test checks it).
PROMPT = "German: {}\nEnglish:"
ANSWER = " {}"
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class CaptionPair:
    """One German–English pair as the model reads it, every list of length T (prompt + answer + end token).

    ``ids``: token ids. ``loss_mask``: 1 where the token is one the model must learn to predict (the English
    answer's tokens and the end token), 0 on the prompt. ``german_word`` / ``english_word``: the index of the
    whitespace word (``de.split()`` / ``en.split()``, as the gold alignments count) each token belongs to, -1 for
    tokens of neither (the prompt's labels, the newline, a space alone, the end token). ``prompt_length``: the
    prompt's tokens, the first ones."""

    ids: list[int]
    loss_mask: list[int]
    german_word: list[int]
    english_word: list[int]
    prompt_length: int

    def __len__(self) -> int:
        return len(self.ids)


def _tokens_with_offsets(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """``text``'s ids without special tokens, and each token's (start, end) characters in ``text``."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoded["input_ids"]), [tuple(span) for span in encoded["offset_mapping"]]
    if len(ids) != len(offsets):
        raise ValueError(f"the tokenizer gave {len(ids)} ids but {len(offsets)} offsets for {text!r}")
    return ids, offsets


def _word_of_tokens(text: str, offsets: Sequence[tuple[int, int]], start: int, words: str) -> list[int]:
    """For each token (its characters ``offsets`` in ``text``), the index of the whitespace word of ``words`` it
    belongs to, where ``words`` sits in ``text`` from character ``start``; -1 for a token outside it.

    A token belongs to the word of its first character that is not a space: byte-level BPE tokens carry the space
    before a word (" Musiker" starts at the space), and a word's tokens never reach into the next word, since the
    tokenizer splits the text at spaces first."""
    word_at = [-1] * len(text)  # character -> word
    for index, match in enumerate(_WORD.finditer(words)):
        for char in range(start + match.start(), start + match.end()):
            word_at[char] = index
    result = []
    for begin, end in offsets:
        while begin < end and text[begin].isspace():
            begin += 1
        result.append(word_at[begin] if begin < end else -1)
    return result


def encode_pair(tokenizer, german: str, english: str, end_id: int | None = None) -> CaptionPair:
    """A caption pair as a ``CaptionPair``: ``PROMPT`` around the German, ``ANSWER`` around the English, then the
    end token (``end_id``; None: the tokenizer's ``eos_token_id``, SmolLM2's ``<|im_end|>``).

    ``tokenizer`` is called as a ``transformers`` fast tokenizer is, ``tokenizer(text, add_special_tokens=False,
    return_offsets_mapping=True)`` -> {"input_ids", "offset_mapping"}: the offsets map tokens to words. Prompt and
    answer are tokenized apart so that the prompt given at translation time is the one trained on."""
    for name, text in (("german", german), ("english", english)):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{name} must be a non-empty sentence, got {text!r}")
        if "\n" in text:
            raise ValueError(f"{name} must be one line: a newline ends the answer at translation time; got {text!r}")
    end_id = tokenizer.eos_token_id if end_id is None else end_id
    if not isinstance(end_id, int) or isinstance(end_id, bool):
        raise ValueError(f"end_id must be a token id (the tokenizer has no eos_token_id); got {end_id!r}")
    prompt_text, answer_text = PROMPT.format(german), ANSWER.format(english)
    prompt, prompt_offsets = _tokens_with_offsets(tokenizer, prompt_text)
    answer, answer_offsets = _tokens_with_offsets(tokenizer, answer_text)
    german_start, english_start = PROMPT.index("{}"), ANSWER.index("{}")
    german_word = _word_of_tokens(prompt_text, prompt_offsets, german_start, german)
    english_word = _word_of_tokens(answer_text, answer_offsets, english_start, english)
    P, A = len(prompt), len(answer)
    return CaptionPair(
        ids=[*prompt, *answer, end_id],
        loss_mask=[0] * P + [1] * (A + 1),
        german_word=[*german_word, *[-1] * (A + 1)],
        english_word=[*[-1] * P, *english_word, -1],
        prompt_length=P,
    )


def encode_corpus(
    tokenizer, corpus: ParallelCorpus, indices: Sequence[int] | None = None, end_id: int | None = None
) -> list[CaptionPair]:
    """``encode_pair`` of the corpus's pairs at ``indices`` (None: all)."""
    indices = range(len(corpus)) if indices is None else indices
    return [encode_pair(tokenizer, corpus.de[i], corpus.en[i], end_id) for i in indices]


def pad_right(pairs: Sequence[CaptionPair], pad_id: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """A batch of pairs, right-padded: ids (N, T), loss mask (N, T) and lengths (N,), T the longest pair's length.

    Padding goes on the right, after each pair's end token, and attention is causal: a position reads only itself
    and the positions before it, so no real token ever reads a pad and its logits are those of the pair alone
    (tested). The pads' own logits are garbage and their loss mask is 0. ``pad_id`` can be any token id."""
    if not pairs:
        raise ValueError("pad_right needs at least one pair")
    lengths = torch.tensor([len(pair) for pair in pairs])
    T = int(lengths.max())
    ids = torch.full((len(pairs), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(pairs), T)
    for row, pair in enumerate(pairs):
        ids[row, : len(pair)] = torch.tensor(pair.ids)
        mask[row, : len(pair)] = torch.tensor(pair.loss_mask, dtype=mask.dtype)
    return ids, mask, lengths


def answer_loss(model: nn.Module, ids: Tensor, mask: Tensor) -> Tensor:
    """Mean next-token cross-entropy over the tokens whose mask is 1: logits at position t predict token t + 1, so
    the loss reads logits[:, :-1] against ids[:, 1:] weighted by mask[:, 1:]. ids, mask (N, T) -> a scalar."""
    logits = model(ids)  # (N, T, V)
    targets, weights = ids[:, 1:], mask[:, 1:].to(logits.dtype)  # (N, T - 1)
    losses = F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), reduction="none")
    return (losses * weights.flatten()).sum() / weights.sum().clamp_min(1)


@dataclass
class TrainingRecord:
    """``losses[s]``: step s's loss (mean over the batch's English tokens); ``seconds[s]``: its wall time (forward,
    backward and update; a ``callback``'s time is not in it)."""

    losses: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def train_adapters(
    model: nn.Module,
    pairs: Sequence[CaptionPair],
    steps: int,
    batch_size: int = 8,
    lr: float = 2e-3,
    seed: int = 0,
    weight_decay: float = 0.0,
    every: int = 0,
    callback: Callable[[int, TrainingRecord], None] | None = None,
) -> TrainingRecord:
    """Train ``model``'s trainable parameters (its adapters, after ``add_lora``) on ``pairs`` with AdamW.

    Each step takes the next ``batch_size`` pairs of a shuffled order (a new shuffle once all are used), drawn from a
    generator seeded with ``seed``: with ``add_lora(..., seed=seed)`` the seed fixes both A's draw and the batch
    order. The batch is right-padded (``pad_right``) and the loss is ``answer_loss``: the English tokens only.
    ``weight_decay`` 0 as ``transformers``' Trainer has it (torch's AdamW defaults to 0.01).
    ``callback(step, record)`` runs after steps ``every``, 2·``every``, … with the record so far (an evaluation, say),
    outside the timed steps.
    torch's number of threads and the model's train/eval mode are left as they are (the GPT has no dropout)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not pairs:
        raise ValueError("no pairs to train on")
    if (every or callback is not None) and (callback is None or not isinstance(every, int) or every < 1):
        raise ValueError("every (a positive int) and callback go together")
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters: add adapters first (helpers.lora.add_lora)")
    optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    record = TrainingRecord()
    for step in range(1, steps + 1):
        start = time.perf_counter()
        if len(order) < batch_size:
            order += torch.randperm(len(pairs), generator=generator).tolist()
        chosen, order = order[:batch_size], order[batch_size:]
        ids, mask, _ = pad_right([pairs[i] for i in chosen])
        loss = answer_loss(model, ids, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        record.losses.append(loss.item())
        record.seconds.append(time.perf_counter() - start)
        if callback is not None and step % every == 0:
            callback(step, record)
    return record


# -- translating ------------------------------------------------------------------------------------------------------


def translate_captions(
    model: GPT, tokenizer, german: Sequence[str], max_new_tokens: int = 48, end_id: int | None = None
) -> list[str]:
    """Each German caption translated greedily from the prompt ``PROMPT`` (``helpers.gpt.generate``, the course's
    KV cache), up to the end token (``end_id``; None: ``tokenizer.eos_token_id``) or ``max_new_tokens``; of the text,
    what comes before the first newline, stripped (an untrained model often goes on with "German: …").

    Prompts of equal token length are generated together as one batch, without padding, so the cache needs no mask
    and each caption gets what it would alone (up to the last bits of batched sums); the answers come back in
    ``german``'s order."""
    if isinstance(german, str):
        raise TypeError("german must be a list of captions, not one string")
    end_id = tokenizer.eos_token_id if end_id is None else end_id
    prompts = [_tokens_with_offsets(tokenizer, PROMPT.format(sentence))[0] for sentence in german]
    by_length: dict[int, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(index)
    answers = [""] * len(prompts)
    device = next(model.parameters()).device
    for indices in by_length.values():
        batch = torch.tensor([prompts[i] for i in indices], device=device)  # (n, T0)
        tokens, _ = generate(model, batch, max_new_tokens, eos_id=end_id)  # (n, T0 + new)
        for row, index in enumerate(indices):
            new = tokens[row, batch.size(1) :].tolist()
            new = new[: new.index(end_id)] if end_id in new else new
            answers[index] = tokenizer.decode(new, skip_special_tokens=True).split("\n")[0].strip()
    return answers


def caption_scores(
    model: GPT, tokenizer, corpus: ParallelCorpus, indices: Sequence[int], max_new_tokens: int = 48
) -> tuple[Scores, list[str]]:
    """sacreBLEU's BLEU and chrF of ``translate_captions`` on the corpus's pairs at ``indices`` (one reference each),
    and the translations."""
    indices = list(indices)
    hypotheses = translate_captions(model, tokenizer, [corpus.de[i] for i in indices], max_new_tokens)
    return score_translations(hypotheses, [corpus.en[i] for i in indices]), hypotheses


# -- how many numbers, and what changed -------------------------------------------------------------------------------


def rank_for_budget(model: nn.Module, targets: str | Sequence[str], budget: int) -> tuple[int, int]:
    """The rank r ≥ 1 whose adapters on ``targets`` train the number of parameters closest to ``budget``, and that
    number: r · Σ (in + out) over the linear layers ``targets`` picks (``helpers.lora.resolve_targets``). A tie
    goes to the smaller rank. SmolLM2 with q and v at r = 8: 8 · 30 · (1152 + 768) = 460,800."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive number of parameters, got {budget!r}")
    modules = dict(model.named_modules())
    per_rank = 0
    for name in resolve_targets(model, targets):
        layer = modules[name]
        per_rank += layer.in_features + layer.out_features
    low = max(1, budget // per_rank)
    rank = min((low, low + 1), key=lambda r: (abs(r * per_rank - budget), r))
    return rank, rank * per_rank


def update_singular_values(layer: LoRALinear) -> Tensor:
    """The r singular values of the layer's update (α/r)·B A, (out, in), largest first, from r × r numbers only.

    With B = Q_B R_B and Aᵀ = Q_A R_A (reduced QR, Q with orthonormal columns), B A = Q_B (R_B R_Aᵀ) Q_Aᵀ, so B A
    has the singular values of the r × r matrix R_B R_Aᵀ: no (out, in) product is formed (tested equal)."""
    B, A = layer.lora_B.detach().double(), layer.lora_A.detach().double()  # (out, r), (r, in)
    _, R_B = torch.linalg.qr(B)  # (r, r) when r <= out
    _, R_A = torch.linalg.qr(A.T)  # (r, r) when r <= in
    return torch.linalg.svdvals(R_B @ R_A.T) * layer.scale


def effective_rank(singular_values: Tensor) -> float:
    """Roy & Vetterli's effective rank (2007): exp of the entropy of the singular values normalised to sum to 1,
    p_i = σ_i / Σ σ. k equal values give k, one non-zero value gives 1; in between it counts how evenly the
    update spreads over its directions. A zero matrix has none: 0."""
    s = singular_values.double().clamp_min(0)
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s[s > 0] / total
    return float(torch.exp(-(p * p.log()).sum()))


def energy_rank(singular_values: Tensor, share: float = 0.9) -> int:
    """The fewest singular values whose squares hold ``share`` of Σ σ² (the update's squared Frobenius norm):
    how many directions the update needs to keep that share of its size. A zero matrix: 0."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    energy = singular_values.double().square().sort(descending=True).values
    total = energy.sum()
    if total <= 0:
        return 0
    cumulative = energy.cumsum(0) / total
    # the small tolerance keeps an exact share (two equal values and share 0.5) from failing on rounding
    return int((cumulative < share - 1e-12).sum()) + 1


@dataclass
class UpdateSizes:
    """What the adapters changed, by layer (rows) and projection (``projections``, the module's name inside its
    block, the attention's "attention.projections." left out: "q_proj", "feed_forward.down_proj"; columns), each
    (n_layers, P); NaN where that layer's projection has no adapter.

    ``norm``: ‖(α/r)·B A‖_F. ``relative``: that over ‖W‖_F, the pretrained weight's. ``effective_rank``: Roy &
    Vetterli's (``effective_rank``). ``energy_rank``: singular values holding ``share`` of the energy."""

    projections: list[str]
    norm: Tensor
    relative: Tensor
    effective_rank: Tensor
    energy_rank: Tensor
    share: float


_BLOCK = re.compile(r"(?:^|\.)blocks\.(\d+)\.")


def update_sizes(model: nn.Module, share: float = 0.9) -> UpdateSizes:
    """``UpdateSizes`` of every LoRA layer of ``model`` (a ``helpers.gpt.GPT``: layers are found as
    "blocks.<i>.…", projections by their names inside the block), merged or not."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError("the model has no LoRA layers: add_lora(model, targets, rank, alpha) first")
    placed = []
    for name, layer in layers.items():
        found = _BLOCK.search(name)
        if found is None:
            raise ValueError(f"{name} is not inside a block (blocks.<i>.…): no layer to file its update under")
        # the name inside the block, the attention's prefix dropped: "q_proj", "out_proj", "feed_forward.down_proj"
        placed.append((int(found.group(1)), name[found.end() :].removeprefix("attention.projections."), layer))
    projections = list(dict.fromkeys(projection for _, projection, _ in placed))
    n_layers = len(getattr(model, "blocks", [])) or max(index for index, _, _ in placed) + 1
    tables = torch.full((4, n_layers, len(projections)), math.nan, dtype=torch.float64)
    for index, projection, layer in placed:
        column = projections.index(projection)
        s = update_singular_values(layer)
        norm = float(s.square().sum().sqrt())  # ‖M‖_F² = Σ σ²
        weight = layer.base.weight.detach().double()
        if layer.merged:  # the update sits inside base.weight: W is what it was before
            weight = weight - layer.delta_weight().detach().double()
        tables[:, index, column] = torch.tensor(
            [norm, norm / float(weight.norm()), effective_rank(s), energy_rank(s, share)]
        )
    return UpdateSizes(projections, tables[0], tables[1], tables[2], tables[3], share)
