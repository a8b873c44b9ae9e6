"""helpers.models.translation: the model against stock PyTorch, decoding, ablation, evaluation, checkpoints."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from helpers.attention import MultiHeadAttention
from helpers.data.corpus import ParallelCorpus
from helpers.data.tokenization import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from helpers.models.translation import (
    CheckpointError,
    Seq2SeqTransformer,
    TranslationConfig,
    Translator,
    ablated_heads,
    alignment_report,
    beam_search,
    greedy_decode,
    load_checkpoint,
    save_checkpoint,
    score_translations,
    teacher_forcing,
    train,
    translation_loss,
    word_attention,
)
from helpers.models.translation.decoding import length_penalty
from helpers.models.translation.model import on_torch_layers
from helpers.models.translation.training import learning_rate_factor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


TINY = dict(d_model=16, heads=2, encoder_layers=2, decoder_layers=2, feedforward=32, dropout=0.0, max_len=32)


def tiny_model(seed: int = 0, src_vocab: int = 11, tgt_vocab: int = 13) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    return Seq2SeqTransformer(TranslationConfig(**TINY), src_vocab, tgt_vocab).eval()


def random_source(N: int = 3, S: int = 7, vocab: int = 11, seed: int = 1) -> torch.Tensor:
    """(N, S) ids BOS ... EOS with different lengths, padded with 0."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((N, S), PAD_ID, dtype=torch.long)
    for n in range(N):
        length = S - n
        src[n, :length] = torch.randint(4, vocab, (length,), generator=g)
        src[n, 0], src[n, length - 1] = BOS_ID, EOS_ID
    return src


# ---------------------------------------------------------------------------------------------
# The model against PyTorch's own layers
# ---------------------------------------------------------------------------------------------
def stock_copy(model: Seq2SeqTransformer) -> nn.Transformer:
    """nn.Transformer with stock nn.TransformerDecoderLayer, loaded with the model's weights."""
    c = model.config
    stock = nn.Transformer(c.d_model, c.heads, c.encoder_layers, c.decoder_layers, c.feedforward, 0.0, batch_first=True)
    stock.load_state_dict(model.transformer.state_dict())
    return stock.eval()


def test_model_equals_stock_transformer_with_scaled_embeddings_and_sinusoidal_positions():
    from helpers.embeddings import sinusoidal_positional_encoding

    model = tiny_model()
    src = random_source()
    tgt_in = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, PAD_ID], [BOS_ID, 4, PAD_ID, PAD_ID]])
    E = model.config.d_model
    pe = sinusoidal_positional_encoding(32, E)
    src_x = model.src_embedding.weight[src] * math.sqrt(E) + pe[: src.size(1)]
    tgt_x = model.tgt_embedding.weight[tgt_in] * math.sqrt(E) + pe[: tgt_in.size(1)]
    stock = stock_copy(model)
    hidden = stock(
        src_x,
        tgt_x,
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(4).bool(),
        src_key_padding_mask=src.eq(PAD_ID),
        tgt_key_padding_mask=tgt_in.eq(PAD_ID),
        memory_key_padding_mask=src.eq(PAD_ID),
    )
    expected = model.generator(hidden)
    with torch.no_grad():
        got = model(src, tgt_in)
        with model.recording():
            recorded = model(src, tgt_in)
    real = tgt_in.ne(PAD_ID)
    assert torch.allclose(got[real], expected[real], atol=1e-5)
    assert torch.allclose(recorded[real], expected[real], atol=1e-5)  # recording does not change the output


@pytest.mark.parametrize("norm_first", [False, True])
def test_model_on_our_attention_equals_the_model_on_torchs_layers_in_outputs_and_gradients(norm_first):
    torch.manual_seed(0)
    ours = Seq2SeqTransformer(TranslationConfig(**{**TINY, "norm_first": norm_first}), 11, 13)
    with torch.no_grad():  # non-zero biases and norms, so that a missed term shows up
        for p in ours.parameters():
            p.add_(0.05 * torch.randn_like(p))
    theirs = on_torch_layers(ours)
    assert list(theirs.state_dict()) == list(ours.state_dict())  # the same keys: checkpoints move both ways
    src = random_source()
    tgt_in = torch.tensor([[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, PAD_ID], [BOS_ID, 4, PAD_ID, PAD_ID]])
    tgt_out = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID], [4, EOS_ID, PAD_ID, PAD_ID]])
    real = tgt_in.ne(PAD_ID)
    for model in (ours, theirs):
        model.train()
        model.loss = translation_loss(model(src, tgt_in), tgt_out, label_smoothing=0.1)
        model.loss.backward()
        with torch.no_grad():
            model.logits = model.eval()(src, tgt_in)
    torch.testing.assert_close(ours.loss, theirs.loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours.logits[real], theirs.logits[real], atol=1e-5, rtol=1e-5)
    their_parameters = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, their_parameters[name].grad, atol=1e-5, rtol=1e-4, msg=name)
    # Decoding agrees too (greedy on our cache against torch's layers re-run on the whole prefix).
    assert greedy_decode(ours, src, max_len=8).ids == [naive_greedy(theirs, row, 8) for row in src]


def test_a_checkpoint_written_by_the_model_on_torchs_layers_loads_and_translates_the_same(tmp_path):
    """Checkpoints saved before the model used the course's own attention hold nn.Transformer's state dict: the
    parameter names are the same, so they load unchanged (format version 1)."""
    sentences = ["Ein Hund läuft.", "Eine Frau singt im Freien."]
    translator = fake_translator([*sentences, "A dog runs.", "A woman sings outdoors."])
    with torch.no_grad():
        for p in translator.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    old = Translator(on_torch_layers(translator.model), translator.source_tokenizer, translator.target_tokenizer)
    path = save_checkpoint(tmp_path / "old.pt", old)
    assert torch.load(path, weights_only=True)["version"] == 1
    loaded, _ = load_checkpoint(path)
    assert isinstance(loaded.model.transformer.decoder.layers[0].multihead_attn, MultiHeadAttention)
    src = random_source(vocab=loaded.source_tokenizer.vocab_size)
    tgt_in = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8], [BOS_ID, 9, 4]])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(src, tgt_in), old.model.eval()(src, tgt_in), atol=1e-5, rtol=1e-5)
    assert loaded.translate(sentences) == translator.translate(sentences)


def test_the_lesson_config_is_the_defaults_and_holds_the_measured_settings():
    from helpers.models.translation.config import LESSON_CONFIG

    assert TranslationConfig() == LESSON_CONFIG
    # The settings benchmarks/RESULTS.md measured: change one only together with a new measurement.
    measured = dict(d_model=64, heads=4, encoder_layers=1, decoder_layers=2, feedforward=128, dropout=0.0)
    measured |= dict(batch_tokens=600, lr=8e-3, warmup_steps=150, label_smoothing=0.1, eval_every=0, steps=2000)
    assert {name: getattr(LESSON_CONFIG, name) for name in measured} == measured


def test_decoder_layers_are_inspectable_and_record_cross_attention_per_head_only_on_request():
    from helpers.layers import InspectableDecoderLayer

    model = tiny_model()
    assert all(isinstance(layer, InspectableDecoderLayer) for layer in model.decoder_layers)
    src = random_source()
    tgt_in = torch.tensor([[BOS_ID, 5, 6], [BOS_ID, 7, 8], [BOS_ID, 9, 4]])
    with torch.no_grad():
        model(src, tgt_in)
    assert all(layer.cross_attn_weights is None for layer in model.decoder_layers)  # off while training
    with torch.no_grad(), model.recording():
        model(src, tgt_in)
    weights = model.cross_attention()
    assert weights.shape == (2, 3, 2, 3, 7)  # (layers, N, h, L, S)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 2, 3), atol=1e-5)
    assert weights[:, 2, :, :, 5:].abs().max() == 0  # sentence 2 has 5 real source tokens: padding gets nothing


def test_teacher_forcing_shifts_the_target_by_one():
    tgt = torch.tensor([[BOS_ID, 5, 6, EOS_ID], [BOS_ID, 7, EOS_ID, PAD_ID]])
    tgt_in, tgt_out = teacher_forcing(tgt)
    assert tgt_in.tolist() == [[BOS_ID, 5, 6], [BOS_ID, 7, EOS_ID]]
    assert tgt_out.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]


def test_learning_rate_warms_up_then_decays():
    config = TranslationConfig(warmup_steps=10, min_lr_ratio=0.1)
    assert learning_rate_factor(0, 0.0, config) == pytest.approx(0.1)
    assert learning_rate_factor(9, 0.0, config) == pytest.approx(1.0)
    assert learning_rate_factor(50, 0.5, config) == pytest.approx(0.55)
    assert learning_rate_factor(100, 1.0, config) == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------
def without_specials(logits: torch.Tensor) -> torch.Tensor:
    """Searches never output <pad> or <bos>: their scores become -inf."""
    logits = logits.clone()
    logits[..., [PAD_ID, BOS_ID]] = float("-inf")
    return logits


def naive_greedy(model: Seq2SeqTransformer, src_row: torch.Tensor, max_len: int) -> list[int]:
    """One sentence, full forward pass each step: the definition batched greedy search must match."""
    src = src_row[src_row.ne(PAD_ID)].unsqueeze(0)
    out = [BOS_ID]
    with torch.no_grad():
        for _ in range(max_len):
            token = int(without_specials(model(src, torch.tensor([out]))[0, -1]).argmax())
            if token == EOS_ID:
                break
            out.append(token)
    return out[1:]


def test_batched_greedy_equals_one_sentence_at_a_time():
    model = tiny_model(seed=3)
    src = random_source(N=4, S=8, seed=5)
    decoded = greedy_decode(model, src, max_len=12)
    assert decoded.ids == [naive_greedy(model, row, 12) for row in src]


def test_greedy_attention_is_what_the_decoder_saw_for_each_produced_token():
    model = tiny_model(seed=3)
    src = random_source(N=3, S=7, seed=2)
    decoded = greedy_decode(model, src, max_len=6, return_attention=True)
    for n, (ids, attention) in enumerate(zip(decoded.ids, decoded.attention, strict=True)):
        S_n = int(src[n].ne(PAD_ID).sum())
        assert attention.shape == (2, 2, len(ids) + 1, S_n)  # (layers, h, T, S_n)
        with torch.no_grad(), model.recording():
            model(src[n : n + 1, :S_n], torch.tensor([[BOS_ID, *ids]]))
        assert torch.allclose(attention, model.cross_attention()[:, 0], atol=1e-5)


def test_beam_of_one_without_length_penalty_is_greedy():
    model = tiny_model(seed=4)
    src = random_source(N=3, S=8, seed=6)
    assert beam_search(model, src, beam_size=1, alpha=0.0, max_len=10).ids == greedy_decode(model, src, max_len=10).ids


def sequence_log_prob(model, src_row, ids) -> float:
    src = src_row[src_row.ne(PAD_ID)].unsqueeze(0)
    target = torch.tensor([[BOS_ID, *ids, EOS_ID]])
    with torch.no_grad():
        log_probs = without_specials(model(src, target[:, :-1])).log_softmax(-1)
    return float(log_probs[0].gather(1, target[0, 1:, None]).sum())


def test_beam_search_finds_a_hypothesis_at_least_as_good_as_greedy_and_is_batch_independent():
    model = tiny_model(seed=7)
    src = random_source(N=3, S=8, seed=8)
    alpha = 0.6
    beams = beam_search(model, src, beam_size=4, alpha=alpha, max_len=10)
    greedy = greedy_decode(model, src, max_len=10)
    for n in range(3):

        def normalised(ids, row=src[n]):
            return sequence_log_prob(model, row, ids) / float(length_penalty(torch.tensor(len(ids) + 1), alpha))

        if len(greedy.ids[n]) < 10:  # greedy finished within the limit, so beam search saw its path too
            assert normalised(beams.ids[n]) >= normalised(greedy.ids[n]) - 1e-4
        single = beam_search(
            model, src[n : n + 1, : int(src[n].ne(PAD_ID).sum())], beam_size=4, alpha=alpha, max_len=10
        )
        assert single.ids[0] == beams.ids[n]
    assert len(beam_search(model, src, beam_size=4, return_attention=True, max_len=5).attention) == 3


def test_decode_step_gives_the_last_row_of_a_full_decode():
    model = tiny_model(seed=2)
    src = random_source(N=3, S=7, seed=4)
    tgt = torch.randint(4, 13, (3, 6), generator=torch.Generator().manual_seed(0))
    tgt[:, 0] = BOS_ID
    with torch.no_grad():
        memory, src_padding = model.encode(src)
        full = model.decode(tgt, memory, src_padding)  # (N, L, V)
        cache = None
        for t in range(tgt.size(1)):
            logits, cache = model.decode_step(tgt[:, t : t + 1], memory, src_padding, cache)
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=1e-5)
    assert [c.shape for c in cache] == [(3, 6, 16)] * 2  # one (N, t, E) per decoder layer


def naive_beam_search(
    model: Seq2SeqTransformer, src_row: torch.Tensor, k: int, alpha: float, max_len: int
) -> list[int]:
    """One sentence, k hypotheses as plain lists, a full forward pass for each: the definition the
    batched, cached search must match. A finished hypothesis keeps its score and competes on."""
    src = src_row[src_row.ne(PAD_ID)].unsqueeze(0)

    def rank(hypothesis):
        _, score, length, _ = hypothesis
        return score / float(length_penalty(torch.tensor(length), alpha))

    beams = [([BOS_ID], 0.0, 0, False)]  # (tokens, log-probability, length with EOS, finished)
    for _ in range(max_len):
        candidates = []
        for tokens, score, length, finished in beams:
            if finished:
                candidates.append((tokens, score, length, True))
                continue
            with torch.no_grad():
                log_probs = without_specials(model(src, torch.tensor([tokens]))[0, -1]).log_softmax(-1).tolist()
            candidates += [([*tokens, t], score + lp, length + 1, t == EOS_ID) for t, lp in enumerate(log_probs)]
        beams = sorted(candidates, key=rank, reverse=True)[:k]
        if all(finished for *_, finished in beams):
            break
    tokens = max(beams, key=rank)[0][1:]
    return tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens


def test_batched_cached_beam_search_equals_the_plain_definition():
    for seed in (7, 9):
        model = tiny_model(seed=seed)
        src = random_source(N=3, S=8, seed=seed + 1)
        batched = beam_search(model, src, beam_size=3, alpha=0.6, max_len=6).ids
        assert batched == [naive_beam_search(model, row, k=3, alpha=0.6, max_len=6) for row in src]


def test_decoding_rejects_bad_sources():
    model = tiny_model()
    with pytest.raises(ValueError, match="int64"):
        greedy_decode(model, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, random_source(), beam_size=0)


# ---------------------------------------------------------------------------------------------
# Head ablation
# ---------------------------------------------------------------------------------------------
def test_ablating_a_head_equals_zeroing_its_attention_output_in_multihead_attention():
    model = tiny_model(seed=2)
    mha = model.decoder_layers[1].multihead_attn
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    d = 8
    with torch.no_grad():
        # By hand: per-head outputs from torch's own attention, head 1 dropped, then the output projection.
        q, k, v = (
            torch.nn.functional.linear(t, w, b)
            for t, w, b in zip((x, mem, mem), mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3), strict=True)
        )
        heads = torch.nn.functional.scaled_dot_product_attention(
            q.view(2, 3, 2, d).transpose(1, 2), k.view(2, 5, 2, d).transpose(1, 2), v.view(2, 5, 2, d).transpose(1, 2)
        )
        heads[:, 1] = 0.0  # (N, h, L, d): silence head 1
        expected = mha.out_proj(heads.transpose(1, 2).reshape(2, 3, 16))
        before = mha.out_proj.weight.clone()
        with ablated_heads(model, {(1, 1)}):
            got, _ = mha(x, mem, mem)
        assert torch.allclose(got, expected, atol=1e-5)
        assert torch.equal(mha.out_proj.weight, before)  # restored afterwards


def test_ablating_every_cross_attention_head_cuts_the_decoder_off_from_the_source():
    model = tiny_model(seed=2)
    tgt_in = torch.tensor([[BOS_ID, 5, 6]])
    everything = {(layer, head) for layer in range(2) for head in range(2)}
    with torch.no_grad(), ablated_heads(model, everything):
        a = model(random_source(N=1, seed=1), tgt_in)
        b = model(random_source(N=1, seed=9), tgt_in)
    assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="layer, head"), ablated_heads(model, {(2, 0)}):
        pass


def test_ablating_every_encoder_head_leaves_each_source_token_to_itself():
    model = tiny_model(seed=2)
    src = random_source(N=1, seed=1)
    changed = src.clone()
    changed[0, 2] = 4 if int(src[0, 2]) != 4 else 5  # another word at position 2 only
    everything = {(layer, head) for layer in range(model.config.encoder_layers) for head in range(model.config.heads)}
    with torch.no_grad():
        mixed = (model.encode(src)[0] - model.encode(changed)[0]).abs().amax(dim=-1)  # (1, S)
        with ablated_heads(model, everything, attention="encoder"):
            alone = (model.encode(src)[0] - model.encode(changed)[0]).abs().amax(dim=-1)
    others = [s for s in range(src.size(1)) if s != 2]
    assert mixed[0, others].min() > 1e-4  # self-attention carries the change to every other token
    assert alone[0, others].max() < 1e-6 and alone[0, 2] > 1e-4  # silenced: each token sees only itself
    with pytest.raises(ValueError, match="'cross', 'decoder' or 'encoder'"), ablated_heads(model, set(), "memory"):
        pass


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------
def test_scores_use_sacrebleu_and_report_its_signature():
    import sacrebleu

    hyps, refs = ["A dog runs outdoors.", "A man sits."], ["A dog runs outdoors.", "A woman sits."]
    scores = score_translations(hyps, refs)
    assert scores.bleu == pytest.approx(round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2))
    assert scores.chrf == pytest.approx(round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2))
    assert "version:" in scores.signature and "nrefs:1" in scores.signature
    assert score_translations(refs, refs).bleu == 100.0
    with pytest.raises(ValueError, match="references"):
        score_translations(hyps, refs[:1])


def test_word_attention_sums_pieces_of_a_source_word_and_averages_rows_of_a_target_word():
    attention = torch.tensor(
        [
            [0.1, 0.2, 0.3, 0.4, 0.0],
            [0.0, 0.5, 0.0, 0.5, 0.0],
            [0.2, 0.2, 0.2, 0.2, 0.2],
        ]
    )  # (T, S): rows "dog", "runs", "." (+ no EOS row here); columns <bos> Hund läuft . <eos>
    words = word_attention(attention, source_words=[-1, 0, 1, 1, -1], target_words=[0, 1, 1])
    assert torch.allclose(words, torch.tensor([[0.2, 0.7], [0.35, 0.45]]))


def fake_translator(vocab_words: list[str]) -> Translator:
    tokenizer = train_tokenizer(vocab_words, kind="word", min_frequency=1)
    model = Seq2SeqTransformer(TranslationConfig(**TINY), tokenizer.vocab_size, tokenizer.vocab_size).eval()
    return Translator(model, tokenizer, tokenizer)


def test_alignment_report_scores_a_head_that_follows_gold_as_perfect(monkeypatch):
    corpus = ParallelCorpus(
        "captions",
        "test",
        de=["Ein Hund läuft im Freien."],
        en=["A dog runs outdoors."],
        alignments=[[(0, 0), (1, 1), (2, 2), (3, 3), (4, 3)]],
    )
    translator = fake_translator(corpus.de + corpus.en)
    # source ids: <bos> Ein Hund läuft im Freien . <eos> (8); target rows: A dog runs outdoors . <eos> (6)
    perfect = torch.zeros(6, 8)
    for row, column in enumerate([1, 2, 3, 5, 6, 7]):
        perfect[row, column] = 1.0
    reversed_ = perfect.flip(1)
    fake = torch.stack([torch.stack([perfect, reversed_])] * 2)  # (layers, h, T, S): head 0 aligns, head 1 does not

    def fake_attention(model, src, ids):
        return [fake for _ in ids]

    monkeypatch.setattr("helpers.models.translation.evaluation.teacher_forced_attention", fake_attention)
    report = alignment_report(translator, corpus)
    assert report.words == 4
    assert report.accuracy[:, 0].tolist() == [1.0, 1.0]
    assert report.accuracy[:, 1].max() < 0.5
    assert report.best_head() == (0, 0)
    with pytest.raises(ValueError, match="gold alignments"):
        alignment_report(translator, ParallelCorpus("multi30k", "test", corpus.de, corpus.en))


# ---------------------------------------------------------------------------------------------
# Training and checkpoints
# ---------------------------------------------------------------------------------------------
def copy_task(n: int = 48) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(n):
        body = torch.randint(4, 11, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        examples.append(([BOS_ID, *body, EOS_ID], [BOS_ID, *body, EOS_ID]))
    return examples


def test_training_is_seeded_lowers_the_loss_and_keeps_the_best_weights():
    config = TranslationConfig(**{**TINY, "max_len": 32}, lr=3e-3, warmup_steps=5, batch_tokens=64, eval_every=10)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = Seq2SeqTransformer(config, 11, 11)
        scores = iter([1.0, 3.0, 2.0])  # validation peaks at step 20: those weights must come back
        saved = {}

        def validate(m, scores=scores, saved=saved):
            score = next(scores)
            saved[score] = copy.deepcopy(m.state_dict())
            return score

        history = train(model, copy_task(), config, steps=30, validate=validate, progress=False, log_every=1)
        runs.append((model, history, saved))
    (model, history, saved), (_model2, history2, _) = runs
    assert history.losses == history2.losses  # same seed, same run
    assert history.losses[-1] < history.losses[0]
    assert history.best_step == 20 and history.val_steps == [10, 20, 30]
    assert all(torch.equal(model.state_dict()[k], saved[3.0][k]) for k in saved[3.0])
    with pytest.raises(ValueError, match="at most one"):
        train(model, copy_task(), config, steps=1, minutes=1.0)


def test_checkpoint_round_trip_loads_with_weights_only_and_translates_the_same(tmp_path):
    sentences = ["Ein Hund läuft.", "Eine Frau singt im Freien."]
    translator = fake_translator([*sentences, "A dog runs.", "A woman sings outdoors."])
    path = save_checkpoint(tmp_path / "model.pt", translator, {"bleu": 12.5}, {"corpus": "captions"})
    raw = torch.load(path, weights_only=True)  # plain values only: no code runs on load
    assert raw["metrics"] == {"bleu": 12.5} and isinstance(raw["source_tokenizer"], str)
    loaded, payload = load_checkpoint(path)
    assert payload["info"]["corpus"] == "captions"
    assert loaded.translate(sentences) == translator.translate(sentences)
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_a_tied_output_layer_is_the_target_embedding_through_training_and_a_checkpoint(tmp_path):
    config = TranslationConfig(**{**TINY, "max_len": 32}, tie_output_embedding=True, lr=3e-3, warmup_steps=5)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(config, 11, 11)
    untied = Seq2SeqTransformer(replace(config, tie_output_embedding=False), 11, 11)
    assert model.generator.weight is model.tgt_embedding.weight
    assert untied.num_parameters() - model.num_parameters() == 11 * TINY["d_model"]  # one (V, E) table fewer
    start = model.generator.weight.detach().clone()
    train(model, copy_task(), config, steps=5, progress=False)
    assert not torch.equal(model.generator.weight, start)  # trained, and still one table
    assert model.generator.weight is model.tgt_embedding.weight
    translator = Translator(model, *[train_tokenizer([str(i) for i in range(7)], kind="word", min_frequency=1)] * 2)
    loaded, _ = load_checkpoint(save_checkpoint(tmp_path / "tied.pt", translator))
    assert loaded.model.generator.weight is loaded.model.tgt_embedding.weight  # tied again after loading
    assert torch.equal(loaded.model.generator.weight, model.generator.weight)
    # a checkpoint written before the field existed loads untied, as it was trained
    before_the_field = {k: v for k, v in config.to_dict().items() if k != "tie_output_embedding"}
    assert TranslationConfig.from_dict(before_the_field).tie_output_embedding is False


def test_truncated_foreign_and_missing_checkpoints_get_clear_errors(tmp_path):
    translator = fake_translator(["Ein Hund läuft.", "A dog runs."])
    good = save_checkpoint(tmp_path / "good.pt", translator)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": torch.zeros(3)}, foreign)
    with pytest.raises(CheckpointError, match="not a translation checkpoint"):
        load_checkpoint(foreign)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(CheckpointError):
        load_checkpoint(text)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "absent.pt")


def test_lesson_notebook_trains_the_benchmarked_configuration():
    """The benchmarks measure LESSON_CONFIG for its steps: the lesson must build from it, not from a hand copy."""
    import json
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "06_translation.ipynb"
    source = "\n".join("".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"])
    assert "config = replace(LESSON_CONFIG, seed=0)" in source
    assert "TranslationConfig(" not in source  # no hand copy of the settings
    assert "fit(translator, train_corpus, val_corpus, steps=config.steps" in source


def test_an_epoch_count_or_a_time_budget_ends_training():
    from helpers.data.batching import make_batches

    config = TranslationConfig(**TINY, batch_tokens=64, eval_every=0)
    examples = copy_task()
    batches = len(make_batches([s for s, _ in examples], [t for _, t in examples], 64, shuffle=False))
    torch.manual_seed(0)
    history = train(Seq2SeqTransformer(config, 11, 11), examples, config, epochs=2, progress=False)
    assert history.steps_done == 2 * batches
    torch.manual_seed(0)
    history = train(Seq2SeqTransformer(config, 11, 11), examples, config, minutes=0.5 / 60, progress=False)
    assert history.steps_done >= 1  # it stopped by itself once the budget was spent
